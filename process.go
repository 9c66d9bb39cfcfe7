package baton

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// The list of live processes: every started client keeps a record of
// itself in the backend (batondriver.ProcessDriver) — host, PID, queues,
// concurrency, busy workers — renewed by a beat every Config.ProcessTTL/3
// and removed when Stop returns, so that ProcessList, `baton processes` and
// the dashboard show who is working the queues. A process that crashed, or
// was cut off from the backend, drops out ProcessTTL after its last beat,
// by the backend's clock.
//
// A beat is one call to the backend on a timer of its own. The busy count
// it carries is read from the pool then: no job costs a call more. A beat
// that fails is logged and tried again at the next tick; the record is
// Baton's own bookkeeping, and jobs never wait for it.

// ProcessInfo is a live worker process: a started client, on any machine,
// working the backend.
type ProcessInfo struct {
	// ID names the record: random, new at each Start.
	ID string
	// Name is the process's Config.ProcessName ("" if none).
	Name string
	// Host is its machine's host name, and PID its process ID there.
	Host string
	PID  int
	// Version is the version of Baton it runs, as its binary records the
	// module github.com/batonhq/baton ("(devel)" for a build of Baton's
	// own module); "" if unknown.
	Version string
	// Queues are the queues it works, in the order of its Config.Queues,
	// each with its weight (1 where none was set) and MaxWorkers. With
	// StrictPriority the order is the priority and the weights do not
	// count.
	Queues         []QueueConfig
	StrictPriority bool
	// Concurrency is its Config.Concurrency, and Busy how many of those
	// workers were in use at its last beat: running a job, or held for the
	// next job a finish leased them.
	Concurrency int
	Busy        int
	// Stopping reports that its Stop has begun: it fetches no more jobs
	// and waits for the running ones.
	Stopping bool
	// StartedAt is the backend's time of its first beat, SeenAt of its
	// latest, and ExpiresAt when it drops out of the list unless it beats
	// again (SeenAt + its ProcessTTL).
	StartedAt time.Time
	SeenAt    time.Time
	ExpiresAt time.Time
}

// Works reports whether the process works queue (one of its Queues).
func (p *ProcessInfo) Works(queue string) bool {
	return slices.ContainsFunc(p.Queues, func(q QueueConfig) bool { return q.Name == queue })
}

// ProcessList returns the live worker processes — the started clients
// working the backend, this one included — sorted by host, then PID, then
// ID; none is an empty slice. A process is listed from its first beat,
// just after its Start, until its Stop returns, or until ProcessTTL has
// passed since its last beat (it crashed, or lost the backend). One call
// to the backend.
func (c *Client) ProcessList(ctx context.Context) ([]*ProcessInfo, error) {
	res, err := c.driver.ProcessList(ctx)
	if err != nil {
		return nil, fmt.Errorf("baton: list processes: %w", err)
	}
	out := make([]*ProcessInfo, len(res.Processes))
	for i, p := range res.Processes {
		info := &ProcessInfo{
			ID: p.ID, Name: p.Name, Host: p.Host, PID: p.PID, Version: p.Version,
			StrictPriority: p.StrictPriority, Concurrency: p.Concurrency, Busy: p.Busy, Stopping: p.Stopping,
			StartedAt: p.StartedAt, SeenAt: p.SeenAt, ExpiresAt: p.ExpiresAt,
		}
		if p.Queues != nil {
			info.Queues = make([]QueueConfig, len(p.Queues))
			for j, q := range p.Queues {
				info.Queues[j] = QueueConfig{Name: q.Name, Weight: q.Weight, MaxWorkers: q.MaxWorkers}
			}
		}
		out[i] = info
	}
	return out, nil
}

// maxBeatWait bounds how long a beat waits for the backend, and
// removeWait the removal of the record at Stop: a call takes well under a
// millisecond, and a record not removed only stays listed until it
// expires.
const (
	maxBeatWait = 5 * time.Second
	removeWait  = time.Second
)

// beater keeps a started client's record: the loop that beats, and what
// it says.
type beater struct {
	id     string
	record batondriver.ProcessRecord // the fields that do not change
	stop   chan struct{}             // closed when Stop has seen the jobs out
	done   chan struct{}             // closed when the loop has returned
	failed bool                      // the last beat failed (loop only)
	beaten bool                      // a beat has arrived (loop only)
}

// newBeater returns the beater of a client about to start.
func newBeater(cfg *config) *beater {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	host, _ := os.Hostname()
	rec := batondriver.ProcessRecord{
		ID: hex.EncodeToString(b[:]), Name: cfg.ProcessName,
		Host: cut(host, batondriver.MaxProcessHostLen), PID: os.Getpid(),
		Version:        cut(batonVersion(), batondriver.MaxProcessVersionLen),
		StrictPriority: cfg.StrictPriority, Concurrency: cfg.Concurrency,
	}
	for i, q := range cfg.Queues[:min(len(cfg.Queues), batondriver.MaxProcessQueues)] {
		rec.Queues = append(rec.Queues, batondriver.ProcessQueue{Name: q.Name, Weight: cfg.weights[i], MaxWorkers: q.MaxWorkers})
	}
	return &beater{id: rec.ID, record: rec, stop: make(chan struct{}), done: make(chan struct{})}
}

// beat keeps the process's record until Stop ends it: one beat at once,
// one more as soon as Stop begins (marked stopping), and one every
// ProcessTTL/3 in between and after.
func (r *runner) beat() {
	b := r.beater
	defer close(b.done)
	t := time.NewTicker(r.cfg.ProcessTTL / 3)
	defer t.Stop()
	stopping := r.fetchCtx.Done()
	for {
		r.beatOnce(stopping == nil)
		select {
		case <-t.C:
		case <-stopping:
			stopping = nil
		case <-b.stop:
			return
		}
	}
}

// beatOnce renews the record, with the workers in use now. Waiting for
// the backend at most a beat's interval (and maxBeatWait), it never delays
// the next beat. The first failure of a run is logged as a warning, the
// rest at debug level, and the recovery again.
func (r *runner) beatOnce(stopping bool) {
	b := r.beater
	p := &batondriver.ProcessBeatParams{ProcessRecord: b.record, TTL: r.cfg.ProcessTTL}
	p.Stopping = stopping
	r.mu.Lock()
	p.Busy = r.cfg.Concurrency - r.free
	r.mu.Unlock()
	// Not cut short by Stop: a call whose reply was not waited for may
	// still reach the backend after the removal that follows it (on
	// another of the client's connections), and list the process again.
	ctx, cancel := context.WithTimeout(context.Background(), min(r.cfg.ProcessTTL/3, maxBeatWait))
	defer cancel()
	res, err := r.c.driver.ProcessBeat(ctx, p)
	switch {
	case err != nil && !b.failed:
		b.failed = true
		r.log.Warn("baton: recording this process in the list of live processes failed; trying again at every beat",
			"process_id", b.id, "err", err)
	case err != nil:
		r.log.Debug("baton: process beat failed again", "process_id", b.id, "err", err)
	case b.failed:
		b.failed = false
		r.log.Info("baton: this process is recorded in the list of live processes again", "process_id", b.id)
	case res.Created && b.beaten:
		// Every beat since the last that arrived was lost, for ProcessTTL.
		r.log.Info("baton: this process's record had expired; recorded again", "process_id", b.id)
	}
	if err == nil {
		b.beaten = true
	}
}

// stopBeating ends the beat loop, once a beat on its way has its reply,
// and removes the process's record, waiting for the backend at most
// removeWait, even if Stop's context has ended. A record not removed
// stays listed until it expires; so does one that a beat whose reply
// never came (it timed out) lists again after the removal. Stop calls it
// last.
func (r *runner) stopBeating() {
	b := r.beater
	close(b.stop)
	<-b.done
	ctx, cancel := context.WithTimeout(context.Background(), removeWait)
	defer cancel()
	if err := r.c.driver.ProcessRemove(ctx, &batondriver.ProcessRemoveParams{ID: b.id}); err != nil {
		r.log.Warn("baton: removing this process from the list of live processes failed; it drops out when its record expires",
			"process_id", b.id, "expires_within", r.cfg.ProcessTTL, "err", err)
	}
}

// batonVersion is the version of module github.com/batonhq/baton in the
// running binary, as the Go toolchain recorded it, or "".
var batonVersion = sync.OnceValue(func() string {
	const path = "github.com/batonhq/baton"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	if bi.Main.Path == path {
		return bi.Main.Version
	}
	for _, m := range bi.Deps {
		if m.Path == path {
			return m.Version
		}
	}
	return ""
})

// cut shortens s to at most n bytes of valid UTF-8.
func cut(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}

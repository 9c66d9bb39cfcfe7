package batonredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/lockcheck"
)

// The lock holder kill tests: child processes take mutexes and a
// semaphore of 3 with leases of 400ms kept by heartbeats, while a chaos
// loop SIGKILLs one of them at random and starts another in its place (a
// new process, a new log), and SIGSTOPs another for two to three leases
// before it SIGCONTs it. Each child writes every event as it happens,
// and a progress event when a slot is granted and when its release is
// called (lockcheck.Workload.Progress), so that a killed process leaves a
// record of the holds it had: each ends at the kill (Event.Killed, when
// kill(2) had returned; lockcheck.KilledProcess). A paused holder's hold
// ends where its own process says it stopped trusting its lease
// (Event.Lost: the lease's Until, read by the resumed process); that
// record is not taken on trust: a hold granted before a pause that
// outlasted the lease must end by the pause's start plus a TTL, for its
// last heartbeat was sent before the pause (lockKillPauseCheck). The
// merged history must then pass lockcheck's checks with Options.Faults
// (overlap among the holders so bounded, fence order, FIFO for waiters
// not paused while they waited, linearizability; not the prompt check,
// for a paused process's calls return late), the mutex of each watched
// kill must be granted again within lockKillSlotBack (slotBackCheck), and
// no key may stay held or waited for once the run is over. Untrusted, as
// it is: what a paused process says of its calls in flight across the
// pause (a grant may have arrived then); the overlap and linearizability
// checks judge those. Not checked: that an Acquire of a killed process
// in flight was granted (it leaves no record; the backend may grant it a
// slot, which no one then holds until its TTL runs out).

func init() { children["lockkillee"] = runLockKillee }

const (
	lockKillTTL = lockFaultTTL
	// lockKillWaitTTL is the waiters' place TTL: a waiter of a killed
	// process is dropped after it, but until then it may be granted a
	// slot, which it holds for its TTL.
	lockKillWaitTTL = 600 * time.Millisecond
	// lockKillSlotBack is how soon a mutex whose holder was killed must be
	// granted again in a watched kill, while the test's waiter waits: the
	// holder's lease runs out within a TTL of the kill, then a waiter of
	// the killed process whose place still lives (up to WaitTTL after the
	// kill) may be granted it and hold it for its TTL; 1.5s of slack for
	// a waiter's recheck and a loaded machine.
	lockKillSlotBack = lockKillWaitTTL + lockKillTTL + 1500*time.Millisecond
	// envLockKillBroken makes every child a broken one, for showing that
	// the checks catch it: "hideheartbeat" (heartbeatHidingDriver),
	// "ignoreloss" (holders that ignore their lease, Workload.IgnoreLoss)
	// or "longlease" (leases kept 10 times longer by the backend than
	// their holders are told).
	envLockKillBroken = "BATON_LOCKKILL_BROKEN"
)

// lockKillWorkload is the workload of each child: TestLockNetworkFaults's
// (8 goroutines, leases of lockFaultTTL, most holds short, a fifth long),
// its long holds up to three leases, kept by heartbeats, so that kills and
// pauses find holders, and waits of up to 3s.
func lockKillWorkload(proc int, seed uint64, d time.Duration) lockcheck.Workload {
	w := lockFaultWorkload(proc, seed, d)
	w.MaxLongHold, w.MaxWait = 3*lockKillTTL, 3*time.Second
	w.IgnoreLoss = os.Getenv(envLockKillBroken) == "ignoreloss"
	return w
}

// runLockKillee is a child process of the kill tests.
func runLockKillee() int {
	var wrap func(batondriver.LockDriver) batondriver.LockDriver
	switch os.Getenv(envLockKillBroken) {
	case "hideheartbeat":
		wrap = func(d batondriver.LockDriver) batondriver.LockDriver { return heartbeatHidingDriver{d} }
	case "longlease":
		wrap = func(d batondriver.LockDriver) batondriver.LockDriver { return longLeaseDriver{d} }
	}
	cfg := &batonlock.Config{Logger: slog.New(slog.DiscardHandler), WaitTTL: lockKillWaitTTL}
	return runWorkloadChild("lockkillee", lockKillWorkload, cfg, wrap)
}

// longLeaseDriver is a broken driver: the backend keeps every lease 10
// times as long as its holder is told, so a killed holder's slot stays
// taken long after its lease should have run out.
type longLeaseDriver struct {
	batondriver.LockDriver
}

func (d longLeaseDriver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	q := *p
	q.TTL *= 10 // BROKEN
	return d.LockDriver.LockAcquire(ctx, &q)
}

func (d longLeaseDriver) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	q := *p
	q.TTL *= 10 // BROKEN
	return d.LockDriver.LockExtend(ctx, &q)
}

// killee is one child process of a kill test.
type killee struct {
	*contenderProc
	proc     int
	progress string
	// signalled is when SIGKILL had been sent (0 if never).
	signalled int64
	pauses    []lockKillPause
}

// lockKillPause is a SIGSTOP of a process: From before the signal was
// sent, Stopped once kill(2) returned, To once SIGCONT's kill(2) returned.
type lockKillPause struct {
	Proc              int
	From, Stopped, To int64
}

// lockKillRun is what a kill run recorded.
type lockKillRun struct {
	h       []lockcheck.Event
	kids    []*killee
	kills   int
	pauses  []lockKillPause
	watched []lockKillWatched
}

// lockKillWatched is a watched kill: of process Proc, holding mutex Key,
// SIGKILL sent at Signalled.
type lockKillWatched struct {
	Proc      int
	Key       string
	Signalled int64
}

// runLockKills runs children on a private Redis for dur through kills and
// pauses (pausePercent of the chaos loop's moves, when none is paused),
// and returns the merged history. broken, if not empty, is passed to every
// child as envLockKillBroken.
func runLockKills(t *testing.T, dur time.Duration, pausePercent int, broken string) *lockKillRun {
	t.Helper()
	srv, prefix, seed, ctx := startLockRun(t, dur)
	rng := rand.New(rand.NewPCG(seed, 0x4b111))
	run := &lockKillRun{}
	var live []*killee
	start := func(d time.Duration) {
		k := &killee{proc: len(run.kids) + 1}
		k.progress = filepath.Join(t.TempDir(), fmt.Sprintf("proc%d.progress.jsonl", k.proc))
		k.contenderProc = startContender(ctx, t, "lockkillee", k.proc, srv.Addr(), prefix, seed, d,
			envContendProgress+"="+k.progress, envLockKillBroken+"="+broken)
		run.kids, live = append(run.kids, k), append(live, k)
		_, err := io.WriteString(k.stdin, "go\n")
		require.NoError(t, err)
		_ = k.stdin.Close()
	}
	for range 3 {
		start(dur)
	}
	end := time.Now().Add(dur) // the first children run a little longer

	// The chaos loop: every 250 to 650ms, SIGKILL one child and start
	// another, or (pausePercent of the times, if none is paused) SIGSTOP one for
	// two to three TTLs, one that holds a slot if any does. First, and
	// then now and then, it calms down (no pause, nothing for a TTL and a
	// WaitTTL) and makes a watched kill: of a process that holds a mutex,
	// the test's own waiter queued for it at once, nothing else done for
	// lockKillSlotBack (see slotBackCheck).
	var (
		paused    *killee
		resumeAt  time.Time
		calm      bool
		lastChaos time.Time
	)
	signal := func(k *killee, sig syscall.Signal) {
		require.NoError(t, k.cmd.Process.Signal(sig), "signal %v to process %d", sig, k.proc)
	}
	resume := func() {
		signal(paused, syscall.SIGCONT)
		p := &paused.pauses[len(paused.pauses)-1]
		p.To = lockcheck.Now()
		run.pauses = append(run.pauses, *p)
		paused, lastChaos = nil, time.Now()
	}
	kill := func(k *killee) {
		signal(k, syscall.SIGKILL)
		k.signalled = lockcheck.Now()
		<-k.done // reaped
		run.kills++
		live = slices.DeleteFunc(live, func(x *killee) bool { return x == k })
		lastChaos = time.Now()
	}
	waiter, err := batonlock.New(faultDriver(t, newClient(t, srv.Addr()), prefix), &batonlock.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	nextAct := time.Now().Add(150 * time.Millisecond)
	for time.Now().Before(end) {
		wait := min(time.Until(nextAct), time.Until(end))
		if paused != nil {
			wait = min(wait, time.Until(resumeAt))
		}
		time.Sleep(wait)
		if paused != nil && !time.Now().Before(resumeAt) {
			resume()
			continue
		}
		if time.Now().Before(nextAct) {
			continue
		}
		var running []*killee
		for _, k := range live {
			if k != paused {
				running = append(running, k)
			}
		}
		if calm && time.Until(end) < lockKillSlotBack+time.Second {
			calm = false // too late: the children would stop before the slot came back
		}
		if calm {
			nextAct = time.Now().Add(20 * time.Millisecond)
			if paused != nil || time.Since(lastChaos) < lockKillTTL+lockKillWaitTTL {
				continue
			}
			for _, k := range running {
				for key := range k.holding(t) {
					if !strings.HasPrefix(key, "mutex") {
						continue
					}
					kill(k)
					run.watched = append(run.watched, lockKillWatched{Proc: k.proc, Key: key, Signalled: k.signalled})
					run.h = append(run.h, lockKillWait(t, waiter, key, len(run.watched)))
					calm, nextAct = false, time.Now()
					if left := time.Until(end); left > 500*time.Millisecond {
						start(left)
					}
					break
				}
				if !calm {
					break
				}
			}
			continue
		}
		nextAct = time.Now().Add(250*time.Millisecond + time.Duration(rng.Int64N(int64(400*time.Millisecond))))
		if time.Until(end) > lockKillSlotBack+lockKillTTL+lockKillWaitTTL+time.Second &&
			(rng.IntN(6) == 0 || len(run.watched) == 0) {
			calm = true
			continue
		}
		k := running[rng.IntN(len(running))]
		if paused == nil && rng.IntN(100) < pausePercent {
			// Pause a holder if there is one: its progress says so.
			var holding []*killee
			for _, k := range running {
				if len(k.holding(t)) > 0 {
					holding = append(holding, k)
				}
			}
			if len(holding) > 0 {
				k = holding[rng.IntN(len(holding))]
			}
			p := lockKillPause{Proc: k.proc, From: lockcheck.Now()}
			signal(k, syscall.SIGSTOP)
			p.Stopped = lockcheck.Now()
			k.pauses = append(k.pauses, p)
			paused, resumeAt = k, time.Now().Add(2*lockKillTTL+time.Duration(rng.Int64N(int64(lockKillTTL))))
			continue
		}
		kill(k)
		if left := time.Until(end); left > 500*time.Millisecond {
			start(left)
		}
	}
	if paused != nil {
		resume()
	}
	for _, k := range live {
		k.wait(t)
	}
	for _, k := range run.kids {
		run.h = append(run.h, k.history(t)...)
	}
	t.Logf("%d processes, %d killed (%d watched), %d pauses", len(run.kids), run.kills, len(run.watched), len(run.pauses))

	lockFaultsDrained(t, waiter, contentionKeys)
	return run
}

// holding returns the keys of which k's progress shows a slot granted
// and its release not yet called.
func (k *killee) holding(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(k.progress)
	if errors.Is(err, os.ErrNotExist) {
		return nil // not created yet
	}
	require.NoError(t, err)
	defer f.Close()
	h, _ := lockcheck.Decode(f) // the last line may be half written
	open := make(map[[2]int64]*lockcheck.Event)
	for i := range h {
		open[[2]int64{int64(h[i].G), h[i].Call}] = &h[i]
	}
	keys := make(map[string]bool)
	for _, e := range open {
		if e.ReleaseCall == 0 {
			keys[e.Key] = true
		}
	}
	return keys
}

// lockKillWait is the test's own waiter for key, queued as the holder of
// key is killed in a watched kill: an Acquire (process 0, goroutine n)
// waiting up to lockKillSlotBack and 2s, whose slot, if granted, is given
// back at once.
func lockKillWait(t *testing.T, l *batonlock.Locker, key string, n int) lockcheck.Event {
	t.Helper()
	e := lockcheck.Event{G: n, Key: key, Limit: 1, Kind: lockcheck.Acquire}
	ctx, cancel := context.WithTimeout(t.Context(), lockKillSlotBack+2*time.Second)
	defer cancel()
	opts := &batonlock.AcquireOpts{Limit: 1, TTL: lockKillTTL, OnWait: func(int) { e.Queued = lockcheck.Now() }}
	e.Call = lockcheck.Now()
	lease, err := l.Acquire(ctx, key, opts)
	e.Return = lockcheck.Now()
	if errors.Is(err, context.DeadlineExceeded) {
		e.Err = "timeout"
		return e
	}
	require.NoError(t, err)
	e.OK, e.Fence = true, lease.Fence()
	e.ReleaseCall = lockcheck.Now()
	err = lease.Release(context.Background())
	e.ReleaseReturn = lockcheck.Now()
	e.Release = lockcheck.Released
	if err != nil {
		e.Release = lockcheck.ReleaseFailed
	}
	return e
}

// history reads k's events: for a killed process, with the holds and
// releases it had under way cut off at the kill.
func (k *killee) history(t *testing.T) []lockcheck.Event {
	t.Helper()
	read := func(path string) []lockcheck.Event {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) && k.signalled != 0 {
			return nil // killed before it began
		}
		require.NoError(t, err)
		defer f.Close()
		h, err := lockcheck.Decode(f)
		if err != nil && k.signalled != 0 {
			// Its last line may have been cut short by the kill: what
			// came before stands.
			t.Logf("process %d (killed): %s: %v", k.proc, path, err)
			err = nil
		}
		require.NoError(t, err, path)
		return h
	}
	final := read(k.log)
	if k.signalled == 0 {
		return final
	}
	return lockcheck.KilledProcess(final, read(k.progress), k.signalled)
}

// check runs every check on the run and returns their violations joined.
func (r *lockKillRun) check(t *testing.T) (lockcheck.Summary, error) {
	t.Helper()
	s := lockcheck.Summarize(r.h)
	t.Log(s)
	opts := &lockcheck.Options{Faults: true, LinearizabilityTimeout: 10 * time.Second}
	for _, p := range r.pauses {
		opts.Isolations = append(opts.Isolations, lockcheck.Isolation{Proc: p.Proc, From: p.From, To: p.To})
	}
	started := time.Now()
	err := errors.Join(lockcheck.Check(r.h, opts), lockKillPauseCheck(r.h, r.pauses), r.slotBackCheck(t))
	t.Logf("checked in %v", time.Since(started).Round(time.Millisecond))
	return s, err
}

// lockKillPauseCheck verifies what a paused process says of its holds: a
// hold granted before a pause longer than a lease must end (its holder
// stop trusting it) by the pause's start plus a TTL, for every heartbeat
// of the lease was sent before the pause. (A grant in flight across the
// pause may be trusted past that: its lease may have been granted during
// the pause; the overlap and linearizability checks judge it.)
func lockKillPauseCheck(h []lockcheck.Event, pauses []lockKillPause) error {
	var bad []string
	b := int64(0)
	for i := range h {
		if b == 0 || h[i].Call < b {
			b = h[i].Call
		}
	}
	for _, p := range pauses {
		if time.Duration(p.To-p.Stopped) <= lockKillTTL {
			continue
		}
		by := p.Stopped + int64(lockKillTTL)
		for i := range h {
			e := &h[i]
			if e.Proc != p.Proc || !e.OK || e.Return > p.From {
				continue
			}
			end := e.HoldEnd()
			if end != 0 && end <= p.From {
				continue // over before the pause
			}
			if end == 0 || end > by {
				bad = append(bad, fmt.Sprintf("p%d/g%d %q fence %d: granted at +%v, held through the pause +%v..+%v until %s, past +%v",
					e.Proc, e.G, e.Key, e.Fence, time.Duration(e.Return-b), time.Duration(p.From-b), time.Duration(p.To-b),
					relOrNever(end, b), time.Duration(by-b)))
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("lockkill: %d holds outlasted their lease through a pause, the first:\n  %s", len(bad), strings.Join(bad[:min(5, len(bad))], "\n  "))
}

func relOrNever(t, b int64) string {
	if t == 0 {
		return "never"
	}
	return fmt.Sprintf("+%v", time.Duration(t-b))
}

// slotBackCheck verifies that the mutex of each watched kill was granted
// again within lockKillSlotBack of the kill: the test's own waiter was
// queued for it from the kill on, and no other kill or pause came within
// a TTL and a WaitTTL before or lockKillSlotBack after. It logs the delays
// to the next grant after every kill of a mutex's holder, watched or not
// (those not watched may be longer: a holder or waiter of another process
// killed or paused meanwhile may be granted the mutex next).
func (r *lockKillRun) slotBackCheck(t *testing.T) error {
	t.Helper()
	next := func(proc int, key string, after int64) int64 {
		n := int64(0)
		for i := range r.h {
			e := &r.h[i]
			if e.Key == key && e.Proc != proc && e.OK && e.Return > after && (n == 0 || e.Return < n) {
				n = e.Return
			}
		}
		return n
	}
	logDelays := func(what string, d []time.Duration) {
		if n := len(d); n > 0 {
			slices.Sort(d)
			t.Logf("%s: a mutex granted again %v after the kill at the median, %v at most (%d kills)",
				what, d[n/2].Round(time.Millisecond), d[n-1].Round(time.Millisecond), n)
		}
	}
	var all, watched []time.Duration
	for i := range r.h {
		if e := &r.h[i]; e.Killed != 0 && e.Limit == 1 {
			if n := next(e.Proc, e.Key, e.Killed); n != 0 {
				all = append(all, time.Duration(n-e.Killed))
			}
		}
	}
	var bad []string
	for _, w := range r.watched {
		n := next(w.Proc, w.Key, w.Signalled)
		if n == 0 || time.Duration(n-w.Signalled) > lockKillSlotBack {
			bad = append(bad, fmt.Sprintf("%q: holder p%d killed; next grant %s after the kill", w.Key, w.Proc, relOrNever(n, w.Signalled)))
			continue
		}
		watched = append(watched, time.Duration(n-w.Signalled))
	}
	logDelays("killed holders", all)
	logDelays("watched kills", watched)
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("lockkill: %d watched kills' mutexes not granted again within %v:\n  %s", len(bad), lockKillSlotBack, strings.Join(bad[:min(5, len(bad))], "\n  "))
}

// TestLockHoldersKilled: three child processes at a time contend on two
// mutexes and a semaphore of 3 with leases of 400ms while a chaos loop
// kills one at random (and starts another) or pauses one for two to three
// leases, every 250 to 650ms. The merged history must pass every check
// (see the top of this file), show holds cut off by kills, leases lost
// through pauses and waiters, and leave no key held or waited for.
//
// It was shown to fail by its broken children (envLockKillBroken, which
// the test passes on to them): with "ignoreloss" the pause check failed
// in each of three runs (5, 8 and 6 holds kept through pauses), overlap
// and linearizability in two of them; with "longlease" the slot check
// failed in each of three runs (the watched mutex granted again 3.95s to
// 4.11s after the kill, against 0.34-0.81s in passing runs), and the
// pause check in one (a heartbeat on resume found its lease still held).
// TestBrokenLockKillsHeartbeatHidden keeps "hideheartbeat" as a test.
//
// BATON_LOCKKILL_DURATION (a Go duration, default 5s) lengthens the run
// (make chaos: 60s).
func TestLockHoldersKilled(t *testing.T) {
	t.Parallel()
	run := runLockKills(t, envDuration(t, "BATON_LOCKKILL_DURATION", 5*time.Second), 67, os.Getenv(envLockKillBroken))
	s, err := run.check(t)
	require.NoError(t, err)
	require.True(t, len(run.watched) > 0 && len(run.pauses) > 0 && s.Procs >= 4 && s.Grants >= 100 && s.Queued > 0 && s.Killed > 0 && s.Lost > 0,
		"too little happened to prove anything: %d watched kills, %d pauses, %v", len(run.watched), len(run.pauses), s)
}

// TestBrokenLockKillsHeartbeatHidden: the children's heartbeats claim
// success whatever the backend says (heartbeatHidingDriver), so a holder
// paused past its lease trusts it again when it resumes, while the
// backend gave its slot to another. The checks must catch it (in rounds
// of 3s, pausing a holder whenever none is paused, up to 30s).
func TestBrokenLockKillsHeartbeatHidden(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		run := runLockKills(t, 3*time.Second, 100, "hideheartbeat")
		s, err := run.check(t)
		if err != nil {
			t.Logf("round %d (%v): caught:\n%v", n, s, err)
			return
		}
		t.Logf("round %d: no violation yet", n)
	}
	t.Fatal("the checks found no violation in a deliberately broken variant")
}

// envDuration is the Go duration in the environment variable name, def if
// it is not set.
func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, name)
	return d
}

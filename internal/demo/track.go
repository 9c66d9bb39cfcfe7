package demo

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
)

// tracker is what the handlers see, kept apart from what the backend says
// so that the checks hold the backend to account: how many jobs of each key
// run at once, the handoffs from one holder to the next, and the jobs of
// the halted key that started.
type tracker struct {
	mu   sync.Mutex
	keys map[string]*keyTrack
	halt haltTrack
}

// keyTrack is one concurrency key as its handlers see it.
type keyTrack struct {
	limit   int // the limit the scenario gave the key
	running int
	maxSeen int
	starts  int // attempts started; numbers the runs, for twin checks

	// Handoffs. waiting holds the jobs parked for a slot — parked when
	// inserted, or due for a retry while the key was busy, and not started
	// since — with when they began to wait; freed is the latest return of
	// a holder while jobs waited. A freed
	// slot promotes a parked job in the same step as the holder's outcome,
	// so a waiting job that starts took the slot of a return while it
	// waited: its handoff runs from the latest such return. (Pairing each
	// start with the oldest return not yet paired would blame a slow
	// handoff on every start after a slot went to a job not seen waiting,
	// such as a retry come due.)
	waiting  map[string]time.Time
	started  map[string]int // attempts started, by job
	freed    time.Time
	handoffs []time.Duration

	parkedPeak int // sampled from the backend
}

// haltTrack is the halted key's window and what started in it.
type haltTrack struct {
	key       string
	fence     int64     // the key's last fence when the halt took effect
	from, to  time.Time // the halt took effect; the resume was asked for
	runningAt int       // holders still running when halted
	starts    []haltStart
}

type haltStart struct {
	at    time.Time
	fence int64
}

func newTracker() *tracker { return &tracker{keys: map[string]*keyTrack{}} }

// key registers a key with the limit the scenario gives it.
func (t *tracker) key(key string, limit int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keys[key] = &keyTrack{limit: limit, waiting: map[string]time.Time{}, started: map[string]int{}}
}

// start records that a handler of key began an attempt of job id, leased
// with fence. It returns the function that records its return.
func (t *tracker) start(key, id string, fence int64) (returned func()) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	if k == nil { // a key the scenario did not plan: checked like any other
		k = &keyTrack{limit: -1, waiting: map[string]time.Time{}, started: map[string]int{}}
		t.keys[key] = k
	}
	k.running++
	k.starts++
	k.maxSeen = max(k.maxSeen, k.running)
	k.started[id]++
	if since, ok := k.waiting[id]; ok {
		delete(k.waiting, id)
		if k.freed.After(since) {
			k.handoffs = append(k.handoffs, now.Sub(k.freed))
		}
	}
	if key == t.halt.key {
		t.halt.starts = append(t.halt.starts, haltStart{at: now, fence: fence})
	}
	return func() {
		now := time.Now()
		t.mu.Lock()
		defer t.mu.Unlock()
		k.running--
		// The slot this return frees goes to a waiting job — or, while
		// the key is halted, to none but a job chained behind it before
		// the halt whose client had not heard of it yet.
		if len(k.waiting) > 0 {
			k.freed = now
		}
	}
}

// parked records that job id of key was parked when inserted, unless it
// has started already.
func (t *tracker) parked(key, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := t.keys[key]; k != nil && k.started[id] == 0 {
		k.waiting[id] = time.Now()
	}
}

// retrying records that job id of key failed its attempt and is due again
// after backoff. When due it is admitted like a new job: parked if the key
// is busy (its slots taken, or jobs parked before it).
func (t *tracker) retrying(key, id string, attempt int, backoff time.Duration) {
	time.AfterFunc(backoff, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		k := t.keys[key]
		if k != nil && k.started[id] == attempt && (len(k.waiting) > 0 || k.running >= k.limit) {
			k.waiting[id] = time.Now()
		}
	})
}

// run says whether a job of key is running, and which run it is.
func (t *tracker) run(key string) (run int, running bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := t.keys[key]
	return k.starts, k.running > 0
}

// runningKeys returns the keys with a job running, in order.
func (t *tracker) runningKeys() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for key, k := range t.keys {
		if k.running > 0 {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// halting records that key is being halted.
func (t *tracker) halting(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.halt.key = key
}

// halted records when the halt took effect and the key's fence then.
func (t *tracker) halted(fence int64, running int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.halt.fence, t.halt.from, t.halt.runningAt = fence, time.Now(), running
}

// resuming records that the key is being resumed: from now its jobs may
// start again. The resume itself promotes the waiting jobs: their starts
// are handoffs only from returns after it.
func (t *tracker) resuming(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.halt.to = time.Now()
	k := t.keys[key]
	k.freed = time.Time{}
	for id := range k.waiting {
		k.waiting[id] = t.halt.to
	}
}

// sampleParked records a key's parked count as the backend reports it.
func (t *tracker) sampleParked(key string, parked int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if k := t.keys[key]; k != nil {
		k.parkedPeak = max(k.parkedPeak, parked)
	}
}

// keyStats is a copy of one key's record.
type keyStats struct {
	key                    string
	limit, maxSeen, starts int
	parkedPeak             int
	handoffs               []time.Duration // sorted
}

// snapshot copies every key's record, sorted by key.
func (t *tracker) snapshot() []keyStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]keyStats, 0, len(t.keys))
	for key, k := range t.keys {
		h := slices.Clone(k.handoffs)
		slices.Sort(h)
		out = append(out, keyStats{
			key: key, limit: k.limit, maxSeen: k.maxSeen, starts: k.starts, parkedPeak: k.parkedPeak,
			handoffs: h,
		})
	}
	slices.SortFunc(out, func(a, b keyStats) int { return strings.Compare(a.key, b.key) })
	return out
}

// haltRecord copies the halted key's record.
func (t *tracker) haltRecord() haltTrack {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := t.halt
	h.starts = slices.Clone(h.starts)
	return h
}

// ticks records the fan-out jobs of each tick: one each, if every tick
// fired once. A job's retries are the same job.
type ticks struct {
	mu    sync.Mutex
	ran   map[time.Time]map[string]bool
	skips map[time.Time]map[int]bool // the processes that skipped each tick
}

// fired records that job id, the fan-out of tick, runs. It returns how many
// fan-out jobs the tick has had and how many ticks have fired.
func (t *ticks) fired(tick time.Time, id string) (jobs, ticks int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ran == nil {
		t.ran = map[time.Time]map[string]bool{}
	}
	tick = tick.UTC()
	if t.ran[tick] == nil {
		t.ran[tick] = map[string]bool{}
	}
	t.ran[tick][id] = true
	return len(t.ran[tick]), len(t.ran)
}

func (t *ticks) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ran)
}

// jobs returns how many fan-out jobs each tick had.
func (t *ticks) jobs() map[time.Time]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[time.Time]int, len(t.ran))
	for tick, ids := range t.ran {
		out[tick] = len(ids)
	}
	return out
}

// skipped records, per process, the fan-out ticks it did not insert and
// logged so: a worker process that wakes for a tick only after the next
// one was due fires the latest and logs the ticks before it
// (baton.PeriodicJob's catch-up); one whose insert of a tick came after a
// later tick's logs it too. A tick that no process fired is explained only
// if every process logged it.
func (t *ticks) skipped(process int, first, last time.Time, every time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.skips == nil {
		t.skips = map[time.Time]map[int]bool{}
	}
	for tick := first.UTC(); !tick.After(last); tick = tick.Add(every) {
		if t.skips[tick] == nil {
			t.skips[tick] = map[int]bool{}
		}
		t.skips[tick][process] = true
	}
}

// skippedBy returns how many processes skipped tick.
func (t *ticks) skippedBy(tick time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.skips[tick.UTC()])
}

// skipLogger is the logger of worker process i: it keeps nothing but the
// ticks baton logs as skipped.
func (t *ticks) skipLogger(i int, every time.Duration) *slog.Logger {
	return slog.New(&skipHandler{ticks: t, process: i, every: every})
}

// skipHandler passes the ticks baton logs as skipped (the attributes
// first_skipped and last_skipped, at Warn), come late (late_tick: a later
// tick was inserted first) or given up (given_up_tick: its insert did not
// finish before the next tick was due, or the client stopped) to
// ticks.skipped, and drops every other record.
type skipHandler struct {
	ticks   *ticks
	process int
	every   time.Duration
}

func (h *skipHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *skipHandler) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *skipHandler) WithGroup(string) slog.Handler                { return h }
func (h *skipHandler) Handle(_ context.Context, r slog.Record) error {
	var first, last time.Time
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "first_skipped":
			first = a.Value.Time()
		case "last_skipped":
			last = a.Value.Time()
		case "late_tick", "given_up_tick":
			first, last = a.Value.Time(), a.Value.Time()
		}
		return true
	})
	if !first.IsZero() && !last.IsZero() {
		h.ticks.skipped(h.process, first, last, h.every)
	}
	return nil
}

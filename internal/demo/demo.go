// Package demo is `baton demo`: a realistic scenario of a few hundred jobs
// run by two worker processes on a real backend, with live progress, then a
// summary and a check of every guarantee Baton gives — per-key limits,
// halting a key, dropping twins, retries, recurring jobs fired once, and no
// job left behind. It fails if any guarantee did not hold.
//
// The scenario (plan.go) is drawn from a fixed seed, so every run is the
// same: webhooks limited to 3 per customer over 20 customers, one of them
// halted and resumed midway; a per-user sync that drops its twins; a
// recurring fan-out of digests; a charge that fails twice, then succeeds.
// The handlers (jobs.go) report to a tracker (track.go) that knows nothing
// of the backend, and the checks (checks.go) hold the backend to what the
// handlers saw.
//
// RunLocks (locks.go) is the older demonstration of standalone locks,
// `baton demo locks`.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// Config configures a run of the demo. nil means the zero value: the full
// scenario, plain output.
type Config struct {
	// Backend names the backend in the header, e.g. "Redis at
	// redis://127.0.0.1:6379". Default "the embedded in-memory backend".
	Backend string
	// Scale multiplies every duration of the scenario. Default 1: about 16
	// seconds. Tests use 0.1. At most 10.
	Scale float64
	// Live redraws the progress in place, for a terminal. Default false: a
	// progress line every 2s (scaled), for logs.
	Live bool
	// Color uses ANSI colors. Default false.
	Color bool
	// Dash, if not empty, serves the dashboard (read-only, without
	// authentication) at this address while the demo runs, and prints its
	// URL; port 0 picks a free port.
	Dash string
	// Sabotage breaks a guarantee on purpose, to show that the checks
	// catch it: "limit" inserts six webhooks of customer:05 that carry a
	// limit of 10 instead of 3; "halt" sets the halted key's limit to 3,
	// not 0; "twin" inserts the syncs with OnBusyWait, so that twins wait
	// instead of being dropped; "retry" gives the charge only 2 attempts;
	// "fanout" gives the second worker process the fan-out's schedule
	// under another name, so that each tick fires twice. Default "": none.
	Sabotage string

	// giveUpAfter is how long the demo waits, once the scenario is over,
	// for every job to end. 0: 30s (scaled), at least 10s. A test of the
	// demo giving up shortens it: the longer the wait, the more fan-out
	// ticks a stalled machine may skip (the fan-out's check holds then
	// only if both processes logged each such tick as skipped).
	giveUpAfter time.Duration
}

// ErrGuarantee is wrapped by Run's error when a guarantee did not hold.
var ErrGuarantee = errors.New("demo: a guarantee did not hold")

// Result is what a run measured and checked.
type Result struct {
	Checks  []Check
	Elapsed time.Duration
	// Processed counts the jobs completed, Retried the attempts that
	// failed and were retried, Dropped the jobs dropped by their key's
	// OnBusyDrop (from the backend's stats).
	Processed, Retried, Dropped int
	// ParkedPeak is the most jobs parked at once, sampled.
	ParkedPeak int
	// Handoffs are the handoff latencies measured, sorted: from a holder's
	// return to the start of a job of its key that waited for the slot it
	// freed.
	Handoffs []time.Duration
}

// Check is one guarantee and whether it held.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// workersPerProcess is each worker process's Config.Concurrency: enough
// for every key to use its slots at once, so that waits come from the keys.
const workersPerProcess = 64

// run is one run of the scenario.
type run struct {
	cfg    Config
	plan   *plan
	track  *tracker
	screen *screen
	ticks  ticks

	clients  []*baton.Client // the two worker processes
	periodic []*baton.PeriodicJob
	every    time.Duration // the fan-out's period
	start    time.Time
	started  time.Time // when both worker processes had started
	stopAt   time.Time // when the workers began to stop

	mu       sync.Mutex
	outcomes map[string]map[baton.JobOutcome]int // by kind
	charge   string                              // the charge's state, for the progress
	chargeID string
	stats    map[string]*baton.QueueStats // the latest sample, by queue
	halt     string                       // the halted key's state, for the progress
	busiest  string
	parked   int                 // peak of the jobs parked in every queue
	backlog  map[string]*backlog // keys with a backlog, for the sampler

	webhooksTotal int
	syncTotal     int
	sync          syncRecord
	digestsQueued atomic.Int64
	fatal         context.CancelCauseFunc
}

// syncRecord is what the sync inserts returned.
type syncRecord struct {
	inserted, dropped int
	// covered counts the twins inserted while a sync of their user was
	// running from before the insert until after it; coveredDropped those
	// of them that were dropped, as they all must be.
	covered, coveredDropped int
}

// d scales a duration of the scenario.
func (r *run) d(x time.Duration) time.Duration { return time.Duration(float64(x) * r.cfg.Scale) }

// Run runs the demo on driver, writing to out. It returns what it measured,
// and an error wrapping ErrGuarantee if a guarantee did not hold, or the
// error that stopped it (ctx's when interrupted).
func Run(ctx context.Context, driver batondriver.Driver, out io.Writer, cfg *Config) (*Result, error) {
	r, err := newRun(driver, out, cfg)
	if err != nil {
		return nil, err
	}
	return r.run(ctx)
}

func newRun(driver batondriver.Driver, out io.Writer, cfg *Config) (*run, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Scale == 0 {
		c.Scale = 1
	}
	if !(c.Scale > 0 && c.Scale <= 10) { // NaN too
		return nil, fmt.Errorf("demo: scale %v out of range (0, 10]", c.Scale)
	}
	if c.Backend == "" {
		c.Backend = "the embedded in-memory backend"
	}
	switch c.Sabotage {
	case "", "limit", "halt", "twin", "retry", "fanout":
	default:
		return nil, fmt.Errorf("demo: unknown sabotage %q (limit, halt, twin, retry, fanout)", c.Sabotage)
	}
	r := &run{
		cfg:      c,
		plan:     newPlan(),
		track:    newTracker(),
		screen:   &screen{out: out, live: c.Live, color: c.Color},
		outcomes: map[string]map[baton.JobOutcome]int{},
		stats:    map[string]*baton.QueueStats{},
		backlog:  map[string]*backlog{},
		charge:   "waiting",
	}
	r.every = max(r.d(fanoutEvery), 250*time.Millisecond)
	every, err := baton.Every(r.every)
	if err != nil {
		return nil, err
	}
	r.periodic = []*baton.PeriodicJob{{
		Name:     "digest-fanout",
		Schedule: every,
		Job:      func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) { return fanoutArgs{Tick: tick}, nil },
	}}
	qs := make([]baton.QueueConfig, len(queues))
	for i, q := range queues {
		qs[i] = baton.QueueConfig{Name: q}
	}
	for i := range 2 {
		periodic := r.periodic
		if c.Sabotage == "fanout" && i == 1 {
			// The same schedule under another name: fired once per name.
			again := *r.periodic[0]
			again.Name += "-again"
			periodic = []*baton.PeriodicJob{&again}
		}
		client, err := baton.NewClient(driver, &baton.Config{
			Workers:      r.workers(),
			Queues:       qs,
			Concurrency:  workersPerProcess,
			PeriodicJobs: periodic,
			OnJobEnd:     r.jobEnded,
			Logger:       r.ticks.skipLogger(i, r.every),
		})
		if err != nil {
			return nil, err
		}
		r.clients = append(r.clients, client)
	}
	for c := range customers {
		r.track.key(fmt.Sprintf("customer:%02d", c), webhookLimit)
	}
	for u := range users {
		r.track.key(fmt.Sprintf("user:%d", u), syncLimit)
	}
	r.webhooksTotal = len(r.plan.webhooks)
	if c.Sabotage == "limit" {
		r.webhooksTotal += sabotageWebhooks
	}
	r.syncTotal = len(r.plan.syncs)
	return r, nil
}

// jobEnded counts the outcome of every attempt (Config.OnJobEnd).
func (r *run) jobEnded(ev *baton.JobEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.outcomes[ev.Kind]
	if m == nil {
		m = map[baton.JobOutcome]int{}
		r.outcomes[ev.Kind] = m
	}
	m[ev.Outcome]++
}

func (r *run) outcome(kind string, o baton.JobOutcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[kind][o]
}

func (r *run) setCharge(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charge = s
}

func (r *run) run(parent context.Context) (*Result, error) {
	r.header()
	if r.cfg.Dash != "" {
		url, stop, err := serveDash(r.cfg.Dash, r.clients[0], r.periodic)
		if err != nil {
			return nil, err
		}
		defer stop()
		r.screen.printf("Dashboard: %s (read-only; it closes when the demo ends)\n\n", r.screen.paint(cyan, url))
	}

	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	r.fatal = cancel
	r.start = time.Now()
	r.screen.start = r.start
	for i, c := range r.clients {
		if err := c.Start(ctx); err != nil {
			for _, started := range r.clients[:i] {
				_ = started.Stop(ctx)
			}
			return nil, err
		}
	}
	r.started = time.Now()
	r.screen.event("2 worker processes started, %d workers each", workersPerProcess)

	var bg sync.WaitGroup
	bgCtx, stopBg := context.WithCancel(ctx)
	bg.Go(func() { r.sample(bgCtx) })
	if r.screen.live {
		r.screen.hideCursor()
		defer r.screen.showCursor()
	}
	bg.Go(func() { r.render(bgCtx) })

	var producers sync.WaitGroup
	producers.Go(func() { r.produceWebhooks(ctx) })
	producers.Go(func() { r.produceSyncs(ctx) })
	producers.Go(func() { r.produceCharge(ctx) })
	producers.Go(func() { r.haltAndResume(ctx) })
	producers.Wait()

	drained := r.drain(ctx)
	r.stopAt = time.Now()
	stopErr := r.stop()
	stopBg()
	bg.Wait()
	r.screen.final(r.progress())
	if err := context.Cause(ctx); err != nil {
		r.screen.printf("\n")
		return nil, err
	}
	if stopErr != nil {
		return nil, stopErr
	}
	if drained {
		r.screen.event("every job has ended; both worker processes stopped")
	} else {
		r.screen.event("%s; both worker processes stopped", r.screen.paint(red, "gave up waiting for every job to end"))
	}

	res, err := r.result(parent)
	if err != nil {
		return nil, err
	}
	r.summary(res)
	var failed []string
	for _, c := range res.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	if len(failed) > 0 {
		return res, fmt.Errorf("%w: %s", ErrGuarantee, strings.Join(failed, "; "))
	}
	return res, nil
}

// header says what is about to happen, in lines of at most 80 columns.
func (r *run) header() {
	s := r.screen
	s.printf("%s on %s\n", s.paint(bold, "Baton demo"), r.cfg.Backend)
	s.printf("%s\n", s.paint(dim, "Two worker processes share it; every guarantee is checked at the end."))
	for _, l := range []string{
		fmt.Sprintf("webhooks  %d deliveries to %d customers, at most %d at once per customer,", r.webhooksTotal, customers, webhookLimit),
		fmt.Sprintf("          the rest parked; customer:%02d is halted at %v, resumed at %v", haltCustomer, r.d(haltAt), r.d(resumeAt)),
		fmt.Sprintf("sync      %d syncs of %d users, one at a time per user; twins are dropped", r.syncTotal, users),
		fmt.Sprintf("digests   every %v a fan-out queues one digest per user, once per tick", r.every),
		"billing   a charge whose payment gateway fails twice, then succeeds",
	} {
		s.printf("  %s\n", l)
	}
	if r.cfg.Sabotage != "" {
		s.printf("  %s\n", s.paint(red, "sabotage: "+r.cfg.Sabotage+" (a guarantee is broken on purpose)"))
	}
	s.printf("\n")
}

// drain waits until every job has ended and the fan-out's latest tick has
// run, at a moment well before its next tick, so that the workers stop with
// nothing queued and no tick half fired. It returns false if that took too
// long: it then still waits, for a while, for such a moment in the digests
// queue alone, so that a job that never ends elsewhere fails only the
// check of terminal states, not the fan-out's too.
func (r *run) drain(ctx context.Context) bool {
	wait := r.cfg.giveUpAfter
	if wait == 0 {
		wait = max(r.d(30*time.Second), 10*time.Second)
	}
	giveUp := time.Now().Add(wait)
	// Between ticks the digests queue is idle for most of every period:
	// many periods, even on a loaded machine, to find it so.
	settleBy := giveUp.Add(max(20*r.every, 5*time.Second))
	sched := r.periodic[0].Schedule
	for {
		now := time.Now()
		next := sched.Next(now)
		latest := next.Add(-r.every)
		ticked := latest.Before(r.firstTick()) || r.ticks.jobs()[latest.UTC()] > 0
		// Idle twice, so that a fan-out between two reads of a queue cannot
		// slip by; and still far from the next tick after the reads, which
		// take a while on a busy machine.
		far := func() bool { return time.Until(next) > r.every/2 }
		if ticked && far() {
			if r.idle(ctx, queues...) && r.idle(ctx, queues...) && far() {
				return true
			}
			if now.After(giveUp) && r.idle(ctx, queueDigests) && r.idle(ctx, queueDigests) && far() {
				return false
			}
		}
		if now.After(settleBy) {
			return false
		}
		select {
		case <-time.After(max(r.d(50*time.Millisecond), 10*time.Millisecond)):
		case <-ctx.Done():
			return false
		}
	}
}

// firstTick is the fan-out's first tick that both worker processes must
// fire: the first one after both had started.
func (r *run) firstTick() time.Time {
	return r.periodic[0].Schedule.Next(r.started)
}

// idle reads each of qs: true if nothing is left to run in them.
func (r *run) idle(ctx context.Context, qs ...string) bool {
	for _, q := range qs {
		st, err := r.clients[0].QueueStats(ctx, q)
		if err != nil || left(st) > 0 {
			return false
		}
	}
	return true
}

// left counts a queue's jobs that have not ended.
func left(st *baton.QueueStats) int {
	return st.Counts[baton.JobStateScheduled] + st.Counts[baton.JobStateParked] +
		st.Counts[baton.JobStateAvailable] + st.Counts[baton.JobStateRunning]
}

// stop stops both worker processes.
func (r *run) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make([]error, len(r.clients))
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() { errs[i] = c.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

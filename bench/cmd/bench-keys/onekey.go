package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/hibiken/asynq"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// lockTTL is the TTL of the asynq rows' redislock locks: far longer than the
// 1 ms they are held, so that none expires under a holder.
const lockTTL = 5 * time.Second

// errBusy is what the retry-on-busy handler returns when the customer's
// lock is taken.
var errBusy = errors.New("customer busy")

// oneRow is one row of part 1.
type oneRow struct {
	name   string
	asynq  bool
	poll   time.Duration // > 0: wait for the lock inside the handler, polling this often; 0: return errBusy
	cfg    asynq.Config  // the asynq Server's config (Concurrency is set by the part)
	capped bool          // limited by -default-cap rather than the plan
	sleep  bool          // the critical section is time.Sleep(work), not a spin (see section.run)
	// unchained sets Config.DisableChaining: the next job is promoted by the
	// finish and leased back, as it is for a client working several queues
	// whose other workers are all busy.
	unchained bool
	// twoQueues makes the client work a second, empty queue beside the
	// jobs' own.
	twoQueues bool
}

// fixedDelay is an asynq RetryDelayFunc that always waits d.
func fixedDelay(d time.Duration) asynq.RetryDelayFunc {
	return func(int, error, *asynq.Task) time.Duration { return d }
}

var oneRows = []oneRow{
	{name: "baton (Limit 1, OnBusyWait)"},
	{name: "baton (Limit 1, OnBusyWait), time.Sleep sections", sleep: true},
	{name: "baton (Limit 1, OnBusyWait), DisableChaining", unchained: true},
	{name: "baton (Limit 1, OnBusyWait), a client of two queues", twoQueues: true},
	{name: "asynq + redislock polling 10ms in the handler", asynq: true, poll: 10 * time.Millisecond},
	{name: "asynq retry-on-busy, retry 100ms, check intervals 100ms", asynq: true, cfg: asynq.Config{
		RetryDelayFunc: fixedDelay(100 * time.Millisecond), TaskCheckInterval: 100 * time.Millisecond,
		DelayedTaskCheckInterval: 100 * time.Millisecond}},
	{name: "asynq retry-on-busy, asynq's default delays and intervals", asynq: true, capped: true},
}

// asynqMaxRetry is the MaxRetry of the retry-on-busy tasks: high enough
// that no task runs out of retries and is archived (lost) while it waits
// for its customer; asynq's default is 25.
const asynqMaxRetry = 100000

// section is the critical section every handler of part 1 runs once per
// job: it spends the job's work and checks that no two run at once.
type section struct {
	work  time.Duration
	sleep bool // time.Sleep(work) rather than spin for work
	base  time.Time
	in    atomic.Int64
	most  maxTracker
	busy  atomic.Int64 // ns spent in the section, summed
	held  atomic.Int64 // ns spent in handlers, summed
	last  atomic.Int64 // ns since base of the last return
	done  *loadgen.Countdown
}

func newSection(work time.Duration, sleep bool, jobs int) *section {
	return &section{work: work, sleep: sleep, base: time.Now(), done: loadgen.NewCountdown(jobs)}
}

// hold counts the time since t0 as spent in a handler.
func (s *section) hold(t0 time.Time) { s.held.Add(int64(time.Since(t0))) }

func (s *section) run() {
	s.most.see(s.in.Add(1))
	t0 := time.Now()
	if s.sleep {
		time.Sleep(s.work)
	} else {
		// Spin on the monotonic clock rather than time.Sleep: a sleep
		// that has to block is rounded up by the runtime to the
		// millisecond granularity of its netpoll (epoll) wait, plus the
		// wake-up, so time.Sleep(1ms) lasted 1.08-1.09 ms here, and the
		// jobs were not the 1 ms jobs the serial ideal counts. Only one
		// handler is ever inside the section (limit 1; most at once
		// checks it), so at most one core spins.
		for time.Since(t0) < s.work {
		}
	}
	t1 := time.Now()
	s.busy.Add(int64(t1.Sub(t0)))
	s.in.Add(-1)
	s.last.Store(int64(t1.Sub(s.base)))
	s.done.Add(1)
}

// oneCell is the result of one round of a row of part 1, or the sum of
// its rounds.
type oneCell struct {
	rounds     int
	jobs, done int
	finished   bool          // every round finished
	limit      time.Duration // when a round was cut off, if not finished
	wall       time.Duration // start of the pool to the last job's return
	busy       time.Duration // time in the critical section, summed
	held       time.Duration // time handlers held a worker, summed over every attempt
	tries      int64         // handler calls, or lock tries for the polling row
	most       int64         // most handlers in the section at once
	errs       int64         // handler errors other than a busy customer
	redis      redisstat.Snap
	drv        driverCounts // Baton only
}

func (c *oneCell) add(o oneCell) {
	if c.rounds == 0 {
		c.finished = true
	}
	c.rounds++
	c.jobs += o.jobs
	c.done += o.done
	c.finished = c.finished && o.finished
	c.limit = o.limit
	c.wall += o.wall
	c.busy += o.busy
	c.held += o.held
	c.tries += o.tries
	c.most = max(c.most, o.most)
	c.errs += o.errs
	c.redis.Add(o.redis)
	c.drv.add(o.drv)
}

// runOneKey is part 1: the rows take turns round by round, but the capped
// row, which runs once, in the first round.
func runOneKey(ctx context.Context, e *env) error {
	p := e.p
	ideal := time.Duration(p.oneJobs) * p.oneWork
	fmt.Fprintf(os.Stderr, "part 1: one key, limit 1: %d jobs of %v, %d workers, %d rounds\n", p.oneJobs, p.oneWork, p.oneWorkers, p.oneRounds)
	var rows []int
	for ri, r := range oneRows {
		if selected(r.name) && !(r.capped && e.defaultCap <= 0) {
			rows = append(rows, ri)
		}
	}
	sums := make([]oneCell, len(oneRows))
	walls := make([][]float64, len(oneRows))
	for round := range p.oneRounds {
		for _, ri := range rows {
			r := oneRows[ri]
			if r.capped && round > 0 {
				continue
			}
			fmt.Fprintf(os.Stderr, "  round %d/%d: %s\n", round+1, p.oneRounds, r.name)
			var (
				c   oneCell
				err error
			)
			if r.asynq {
				c, err = oneAsynq(ctx, e, r, fmt.Sprintf("one-%d-%d", ri, round))
			} else {
				c, err = oneBaton(ctx, e, r, fmt.Sprintf("bko%d-%d", ri, round))
			}
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			sums[ri].add(c)
			if c.finished {
				walls[ri] = append(walls[ri], c.wall.Seconds())
			}
		}
	}

	t := &table.Table{
		Title: fmt.Sprintf("1. One key, limit 1: %d jobs of %v each, %d workers (serial ideal %v; median of %d rounds, rows interleaved)",
			p.oneJobs, p.oneWork, p.oneWorkers, ideal, p.oneRounds),
		Header: []string{"implementation", "done", "wall", "rounds", "x ideal", "section ms/job", "key idle ms/job",
			"worker ms/job", "attempts/job", "most at once", "cmds/job", "server calls/job", "Redis CPU µs/job", "Redis CPU"},
	}
	var breakdown, notes, infos []string
	batonWall := time.Duration(0)
	for _, ri := range rows {
		r, c := oneRows[ri], sums[ri]
		done := float64(max(c.done, 1))
		med := loadgen.Median(walls[ri])
		doneCell, wall, ratio := fmt.Sprint(c.done/c.rounds), fmt.Sprintf("%.2fs", med), table.Float(med/ideal.Seconds(), 2)
		rng := "-"
		if len(walls[ri]) > 1 {
			rng = fmt.Sprintf("%.2f..%.2f", slices.Min(walls[ri]), slices.Max(walls[ri]))
		}
		span, idle := c.wall, table.Float((c.wall-c.busy).Seconds()*1e3/done, 3)
		if !c.finished {
			doneCell = fmt.Sprintf("not finished: %d of %d done", c.done, c.jobs)
			wall, ratio = fmt.Sprintf("> %.0fs", c.limit.Seconds()), fmt.Sprintf("> %.0f", c.limit.Seconds()/ideal.Seconds())
			span, idle = time.Duration(c.rounds)*c.limit, "-"
		}
		redisstat.CheckCounters(&c.redis)
		t.Add(r.name, doneCell, wall, rng, ratio,
			table.Float(c.busy.Seconds()*1e3/done, 3), idle, table.Float(c.held.Seconds()*1e3/done, 2),
			table.Float(float64(c.tries)/done, 2), fmt.Sprint(c.most),
			table.Float(float64(c.redis.Client)/done, 1),
			table.Float(float64(c.redis.Total)/done, 1),
			table.Float(c.redis.CPU*1e6/done, 1),
			fmt.Sprintf("%.0f%%", 100*c.redis.CPU/span.Seconds()))
		if c.errs > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d handler errors other than a busy customer.", r.name, c.errs))
		}
		if (r.unchained || r.twoQueues) && c.finished {
			infos = append(infos, fmt.Sprintf("info: %s: wall / serial ideal = %.2fs / %v = %.2fx",
				r.name, med, ideal, med/ideal.Seconds()))
		}
		if !r.asynq && !r.sleep && !r.unchained && !r.twoQueues {
			batonWall = time.Duration(med * float64(time.Second))
			if !c.finished {
				batonWall = -1
			}
		}
		if r.sleep && c.finished {
			sections := c.busy / time.Duration(c.rounds) // the sections' sum, mean over the rounds
			infos = append(infos, fmt.Sprintf("info: %s: wall / serial ideal = %.2fs / %v = %.2fx;",
				r.name, med, ideal, med/ideal.Seconds()),
				fmt.Sprintf("  wall / its sections' sum = %.2fs / %.2fs = %.2fx (%.3f ms per section)",
					med, sections.Seconds(), med/sections.Seconds(), c.busy.Seconds()*1e3/done))
		}
		if !r.asynq {
			d := c.drv
			notes = append(notes, fmt.Sprintf("%s: per job %.2f fetches (%.2f returned a job), %.2f finishes, %.2f waits (BLPOP);",
				r.name, float64(d.fetches)/done, float64(d.fetched)/done, float64(d.finishes)/done, float64(d.waits)/done),
				fmt.Sprintf("  %.2f script calls (FCALL/EVALSHA) per job, %.1f µs of script time per job.",
					float64(scriptCalls(c.redis))/done, float64(scriptUsec(c.redis))/done))
		}
		if verbose {
			breakdown = append(breakdown, fmt.Sprintf("%s: %s", r.name, c.redis.Describe(int64(done))))
		}
	}
	t.Note("wall: from starting the pool (the backlog inserted before) to the return of the last job's handler;")
	t.Note("  the median round, and the range over the rounds. The other columns are over all rounds.")
	t.Note("x ideal: wall over the serial ideal, %d x %v. section ms/job: the time each job spent in its", p.oneJobs, p.oneWork)
	t.Note("  critical section, mean: the true serial floor is %d times that. The section spins on the clock", p.oneJobs)
	t.Note("  until %v has passed (exact, one core busy while it lasts): time.Sleep(%v) overshoots, by as much as", p.oneWork, p.oneWork)
	t.Note("  its row's section ms/job shows. The \"time.Sleep sections\" row is the main Baton row with time.Sleep(%v)", p.oneWork)
	t.Note("  sections instead, as in earlier published runs, for comparison with them. The DisableChaining row")
	t.Note("  is the main row without chained jobs: each next job is promoted by the finish and leased back, one")
	t.Note("  round trip per job, as for a client of several queues with no other worker free. The two-queue row's")
	t.Note("  client works a second, empty queue too: it chains while another worker is free. key idle ms/job:")
	t.Note("  (wall - the sections' sum) / jobs: how long the key stood idle per job, between a job's return and the")
	t.Note("  next one's start (the handoff), on average. worker ms/job: how long handlers held a worker per completed")
	t.Note("  job, every attempt and every wait for the lock included: time the pool could not give other customers.")
	t.Note("attempts/job: handler calls per completed job; for the redislock row, lock tries (SET NX scripts).")
	t.Note("most at once: most handlers inside the critical section at the same time (must be 1).")
	t.Note("cmds/job: commands the clients sent per completed job (client-side count); server calls/job: INFO stats")
	t.Note("  total_commands_processed growth per completed job, every redis.call inside scripts included.")
	t.Note("asynq: Concurrency %d; the lock is bsm/redislock on the customer's key (TTL %v), obtained in the", p.oneWorkers, lockTTL)
	t.Note("  handler: polling every 10ms (LinearBackoff), or once (NoRetry), the handler returning an error when")
	t.Note("  it is taken; asynq then retries the task after RetryDelayFunc. Tasks are enqueued with MaxRetry %d", asynqMaxRetry)
	t.Note("  so that none is archived. asynq's defaults: RetryDelayFunc n^4+15+rand(30)*(n+1) s,")
	t.Note("  DelayedTaskCheckInterval 5s, TaskCheckInterval 1s; one round, cut off after -default-cap (%v).", e.defaultCap)
	for _, n := range notes {
		t.Note("%s", n)
	}
	for _, n := range infos {
		t.Note("%s", n)
	}
	t.Print(os.Stdout)
	table.PrintBreakdown(os.Stdout, "1. per row (-v): server command calls per completed job x µs per call", breakdown)
	switch {
	case batonWall > 0:
		e.goals.Add(batonWall.Seconds() <= 1.15*ideal.Seconds(), "one key, limit 1: wall <= 1.15x the serial ideal %v: %.2fs = %.2fx",
			ideal, batonWall.Seconds(), batonWall.Seconds()/ideal.Seconds())
	case batonWall < 0:
		e.goals.Add(false, "one key, limit 1: wall <= 1.15x the serial ideal %v: not finished", ideal)
	}
	return nil
}

// oneBaton runs one of part 1's Baton rows on key prefix.
func oneBaton(ctx context.Context, e *env, r oneRow, prefix string) (oneCell, error) {
	p := e.p
	s := newSection(p.oneWork, r.sleep, p.oneJobs)
	var calls atomic.Int64
	b, err := newBatonSideConfig(e.addr, prefix, p.oneWorkers, func(ctx context.Context, job *baton.Job[keyArgs]) error {
		defer s.hold(time.Now())
		calls.Add(1)
		s.run()
		return nil
	}, func(c *baton.Config) {
		c.DisableChaining = r.unchained
		if r.twoQueues {
			c.Queues = []baton.QueueConfig{{Name: "default"}, {Name: "other"}}
		}
	})
	if err != nil {
		return oneCell{}, err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	if err := b.insert(ctx, p.oneJobs, func(int) int { return 42 }, func(int) *baton.InsertOpts { return keyed(1) }); err != nil {
		return oneCell{}, err
	}
	if err := b.expect(ctx, map[baton.JobState]int{baton.JobStateAvailable: 1, baton.JobStateParked: p.oneJobs - 1}); err != nil {
		return oneCell{}, fmt.Errorf("after the insert: %w", err)
	}

	w := redisstat.Window{Stats: e.stats, Sent: &b.Sent}
	if err := w.Start(ctx); err != nil {
		return oneCell{}, err
	}
	before := b.td.counts()
	t0 := time.Since(s.base)
	if err := b.client.Start(ctx); err != nil {
		return oneCell{}, err
	}
	finished := s.done.Wait(p.oneLimit)
	err = w.End(ctx)
	c := oneCell{jobs: p.oneJobs, done: int(s.done.Count()), finished: finished, limit: p.oneLimit,
		wall: time.Duration(s.last.Load()) - t0, busy: time.Duration(s.busy.Load()), tries: calls.Load(),
		most: s.most.v.Load(), redis: w.Delta, drv: b.td.counts().sub(before)}
	err = errors.Join(err, b.stop(p.stopGrace))
	c.held = time.Duration(s.held.Load())
	if finished {
		err = errors.Join(err, b.expect(ctx, map[baton.JobState]int{baton.JobStateCompleted: p.oneJobs}))
	}
	return c, err
}

// oneAsynq runs one of part 1's asynq rows on queue.
func oneAsynq(ctx context.Context, e *env, r oneRow, queue string) (oneCell, error) {
	p := e.p
	cfg := r.cfg
	cfg.Concurrency = p.oneWorkers
	a := newAsynqSide(e.addr, queue, cfg)
	defer a.Close()
	defer func() {
		_, _ = redisstat.DeleteKeys(context.Background(), e.addr, jobcell.AsynqDB, a.Keys())
		_, _ = redisstat.DeleteKeys(context.Background(), e.addr, jobcell.AsynqDB, a.lockKey())
	}()
	var opts []asynq.Option
	if r.poll == 0 {
		opts = append(opts, asynq.MaxRetry(asynqMaxRetry))
	}
	customer42 := func(i int) any { return keyArgs{I: i, Customer: 42} }
	if err := a.Backlog(ctx, p.oneJobs, customer42, opts...); err != nil {
		return oneCell{}, err
	}
	s := newSection(p.oneWork, r.sleep, p.oneJobs)
	var calls, backoffs, errs atomic.Int64
	handler := asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		defer s.hold(time.Now())
		calls.Add(1)
		var opt *redislock.Options // nil: one try
		if r.poll > 0 {
			opt = &redislock.Options{RetryStrategy: countingRetry{every: r.poll, n: &backoffs}}
		}
		lock, err := a.locker.Obtain(ctx, a.lockKey(), lockTTL, opt)
		if r.poll == 0 && errors.Is(err, redislock.ErrNotObtained) {
			return errBusy
		}
		if err != nil {
			errs.Add(1)
			return err
		}
		s.run()
		if err := lock.Release(context.WithoutCancel(ctx)); err != nil {
			errs.Add(1)
		}
		return nil
	})

	limit := p.oneLimit
	if r.capped {
		limit = e.defaultCap
	}
	w := redisstat.Window{Stats: e.stats, Sent: &a.Sent}
	if err := w.Start(ctx); err != nil {
		return oneCell{}, err
	}
	t0 := time.Since(s.base)
	if err := a.Server.Start(handler); err != nil {
		return oneCell{}, err
	}
	finished := s.done.Wait(limit)
	err := w.End(ctx)
	c := oneCell{jobs: p.oneJobs, done: int(s.done.Count()), finished: finished, limit: limit,
		wall: time.Duration(s.last.Load()) - t0, busy: time.Duration(s.busy.Load()),
		tries: calls.Load() + backoffs.Load(), most: s.most.v.Load(), errs: errs.Load(),
		redis: w.Delta}
	a.Server.Shutdown()
	c.held = time.Duration(s.held.Load())
	if finished {
		info, ierr := a.Inspector.GetQueueInfo(a.Queue)
		if ierr != nil {
			return c, errors.Join(err, ierr)
		}
		if info.Size != 0 || info.Archived != 0 {
			err = errors.Join(err, fmt.Errorf("after the run: %d tasks still in the queue, %d archived", info.Size, info.Archived))
		}
	}
	return c, err
}

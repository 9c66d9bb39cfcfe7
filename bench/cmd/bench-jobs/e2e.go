package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// e2eWorkers are the worker pool sizes of part 2.
var e2eWorkers = []int{16, 64}

// e2eRow is one row of the end-to-end table.
type e2eRow struct {
	name      string
	asynq     bool
	retention time.Duration // Baton's Config.CompletedRetention (0: its default, 24h)
}

var e2eRows = []e2eRow{
	{name: "baton"},
	{name: "baton (CompletedRetention -1)", retention: -1},
	{name: "asynq", asynq: true},
}

// e2eCell is one round of one end-to-end cell, or the sum of its rounds.
type e2eCell struct {
	jobs    int64
	elapsed time.Duration // Start to the last outcome recorded
	handled time.Duration // Start to the last handler called
	redis   redisstat.Snap
	cpu     time.Duration
	drv     driverCounts // Baton only
}

func (c e2eCell) rate() float64 { return float64(c.jobs) / c.elapsed.Seconds() }

func (c *e2eCell) add(o e2eCell) {
	c.jobs += o.jobs
	c.elapsed += o.elapsed
	c.handled += o.handled
	c.cpu += o.cpu
	c.redis.Add(o.redis)
	c.drv.add(o.drv)
}

// runE2E is part 2: for each pool size and round, every row works off a
// backlog of p.e2eJobs no-op jobs; rows take turns round by round.
func runE2E(ctx context.Context, e *env) error {
	p := e.p
	fmt.Fprintf(os.Stderr, "part 2: end to end (%d jobs, %d rounds per cell)\n", p.e2eJobs, p.e2eRounds)
	rows := selectedRows(e2eRows, func(r e2eRow) string { return r.name })
	rates := map[string]map[int][]float64{}
	sums := map[string]map[int]*e2eCell{}
	for _, r := range rows {
		rates[r.name] = map[int][]float64{}
		sums[r.name] = map[int]*e2eCell{}
		for _, n := range e2eWorkers {
			sums[r.name][n] = &e2eCell{}
		}
	}
	cell := 0
	for _, n := range e2eWorkers {
		for round := range p.e2eRounds {
			for ri, r := range rows {
				cell++
				fmt.Fprintf(os.Stderr, "  %2d workers, round %d/%d: %s\n", n, round+1, p.e2eRounds, r.name)
				var (
					c   e2eCell
					err error
				)
				if r.asynq {
					c, err = e2eAsynq(ctx, e, n, fmt.Sprintf("e2e-%d-%d-%d", ri, n, round))
				} else {
					c, err = e2eBaton(ctx, e, n, r.retention, fmt.Sprintf("bje%d", cell))
				}
				if err != nil {
					return fmt.Errorf("%s, %d workers: %w", r.name, n, err)
				}
				rates[r.name][n] = append(rates[r.name][n], c.rate())
				sums[r.name][n].add(c)
			}
		}
	}

	t := &table.Table{
		Title: fmt.Sprintf("2. End to end: a backlog of %d no-op jobs worked off by a pool of N workers (median of %d rounds, rows interleaved)",
			p.e2eJobs, p.e2eRounds),
		Header: []string{"implementation", "workers", "jobs/s", "rounds", "handlers done", "cmds/job", "server calls/job",
			"Redis CPU µs/job", "Redis CPU", "bench CPU µs/job", "bench CPU"},
	}
	var breakdown []string
	for _, n := range e2eWorkers {
		for _, r := range rows {
			s := sums[r.name][n]
			jobs, secs := float64(s.jobs), s.elapsed.Seconds()
			redisstat.CheckCounters(&s.redis)
			t.Add(r.name, fmt.Sprint(n), table.Rate(loadgen.Median(rates[r.name][n])), table.Range(rates[r.name][n]),
				table.Rate(jobs/s.handled.Seconds()),
				table.Float(float64(s.redis.Client)/jobs, 2),
				table.Float(float64(s.redis.Total)/jobs, 1),
				table.Float(s.redis.CPU*1e6/jobs, 1),
				fmt.Sprintf("%.0f%%", 100*s.redis.CPU/secs),
				table.Float(s.cpu.Seconds()*1e6/jobs, 1),
				fmt.Sprintf("%.0f%%", 100*s.cpu.Seconds()/secs))
			if verbose {
				breakdown = append(breakdown, fmt.Sprintf("%s, %d workers: %s", r.name, n, s.redis.Describe(s.jobs)))
			}
		}
	}
	t.Note("jobs/s: the backlog over the time from starting the pool to the last outcome recorded in Redis.")
	t.Note("handlers done: the backlog over the time from starting the pool to the last handler called.")
	t.Note("Baton: defaults but Concurrency (LeaseTTL 30s, CompletedRetention 24h: completed jobs are kept;")
	t.Note("-1 deletes them at once). asynq: defaults but Concurrency (its Retention 0 deletes completed tasks).")
	t.Note("cmds/job: commands the clients sent per job, counted client-side; server calls/job: INFO stats")
	t.Note("total_commands_processed growth per job (client commands plus every redis.call inside scripts).")
	t.Note("Redis CPU / bench CPU: the server's / this process's CPU in the windows (100%% = one core).")
	t.Note("Not counted: inserting the backlog, stopping the pool.")
	t.Print(os.Stdout)

	d := &table.Table{
		Title: "2b. Baton's round trips in part 2 (all rounds), counted by a wrapper around the driver",
		Header: []string{"implementation", "workers", "fetches/job", "jobs/fetch", "asked/fetch", "empty fetches",
			"fetch RTT", "finishes/job", "jobs/finish", "finish RTT", "waits"},
	}
	for _, n := range e2eWorkers {
		for _, r := range rows {
			if r.asynq {
				continue
			}
			c := sums[r.name][n].drv
			jobs := float64(sums[r.name][n].jobs)
			d.Add(r.name, fmt.Sprint(n),
				table.Float(float64(c.fetches)/jobs, 3), table.Float(float64(c.fetched)/float64(c.fetches), 1),
				table.Float(float64(c.fetchAsked)/float64(c.fetches), 1), fmt.Sprint(c.fetchEmpty),
				table.Dur(c.fetchTime/time.Duration(max(c.fetches, 1))),
				table.Float(float64(c.finishes)/jobs, 3), table.Float(float64(c.finished)/float64(c.finishes), 1),
				table.Dur(c.finishTime/time.Duration(max(c.finishes, 1))), fmt.Sprint(c.waits))
		}
	}
	d.Note("jobs/fetch: jobs a JobFetch returned, mean; asked/fetch: its Max (free workers, at most 100), mean.")
	d.Note("RTT: mean time a JobFetch / JobFinish call took, as the client saw it. waits: JobWait calls (BLPOP).")
	d.Print(os.Stdout)
	table.PrintBreakdown(os.Stdout, "2. per cell (-v): server command calls per job x µs per call", breakdown)

	if only == nil {
		b64, a64 := loadgen.Median(rates["baton"][64]), loadgen.Median(rates["asynq"][64])
		e.goals.Add(b64 >= 2*a64, "end to end, 64 workers: baton >= 2x asynq: %.0f / %.0f = %.2fx", b64, a64, b64/a64)
		e.goals.Add(b64 >= 18000, "end to end, 64 workers: baton >= 18k jobs/s (the issue's 2x asynq): %.0f", b64)
	}
	return nil
}

// e2eBaton runs one Baton end-to-end cell on key prefix.
func e2eBaton(ctx context.Context, e *env, workers int, retention time.Duration, prefix string) (e2eCell, error) {
	jobs := e.p.e2eJobs
	handled := loadgen.NewCountdown(jobs)
	work := func(ctx context.Context, job *baton.Job[benchArgs]) error {
		handled.Add(1)
		return nil
	}
	b, err := newBatonSide(e.addr, prefix, &baton.Config{Concurrency: workers, CompletedRetention: retention}, work)
	if err != nil {
		return e2eCell{}, err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	if err := b.backlog(ctx, jobs); err != nil {
		return e2eCell{}, err
	}
	recorded := loadgen.NewCountdown(jobs)
	b.cd.onRecorded.Store(recorded)
	before := b.cd.counts()

	w := redisstat.Window{Stats: e.stats, Sent: &b.Sent}
	if err := w.Start(ctx); err != nil {
		return e2eCell{}, err
	}
	t0 := time.Now()
	if err := b.client.Start(ctx); err != nil {
		return e2eCell{}, err
	}
	limit := time.NewTimer(e.p.e2eLimit)
	defer limit.Stop()
	var tHandled, tDone time.Time
	select {
	case <-handled.Done():
		tHandled = time.Now()
	case <-limit.C:
	}
	if !tHandled.IsZero() {
		select {
		case <-recorded.Done():
			tDone = time.Now()
		case <-limit.C:
		}
	}
	err = w.End(ctx)
	after := b.cd.counts()
	stopCtx, cancel := context.WithTimeout(ctx, e.p.stopGrace)
	defer cancel()
	err = errors.Join(err, b.client.Stop(stopCtx))
	if tDone.IsZero() {
		return e2eCell{}, errors.Join(err, fmt.Errorf("not done within %v: %d handled, %d recorded", e.p.e2eLimit, handled.Count(), b.cd.recorded.Load()))
	}

	// Check the outcome in Redis.
	st, serr := b.client.QueueStats(ctx, "default")
	if serr != nil {
		return e2eCell{}, errors.Join(err, serr)
	}
	want := map[baton.JobState]int{baton.JobStateCompleted: jobs}
	if retention < 0 {
		want = map[baton.JobState]int{}
	}
	for state, got := range st.Counts {
		if got != want[state] {
			err = errors.Join(err, fmt.Errorf("after the run: %d jobs %s, want %d", got, state, want[state]))
		}
	}
	if n := handled.Count(); n != int64(jobs) {
		err = errors.Join(err, fmt.Errorf("handlers called %d times, want %d", n, jobs))
	}
	d := after
	d.fetches -= before.fetches
	d.fetched -= before.fetched
	d.fetchAsked -= before.fetchAsked
	d.fetchEmpty -= before.fetchEmpty
	d.finishes -= before.finishes
	d.finished -= before.finished
	d.waits -= before.waits
	d.fetchTime -= before.fetchTime
	d.finishTime -= before.finishTime
	return e2eCell{jobs: int64(jobs), elapsed: tDone.Sub(t0), handled: tHandled.Sub(t0),
		redis: w.Delta, cpu: w.CPU, drv: d}, err
}

// e2eAsynq runs one asynq end-to-end cell on queue. asynq reports no
// outcome to the caller, so once every handler has been called the
// Inspector is asked every millisecond until the queue has no active task
// left and its processed total is the backlog.
func e2eAsynq(ctx context.Context, e *env, workers int, queue string) (e2eCell, error) {
	jobs := e.p.e2eJobs
	a := jobcell.NewAsynq(e.addr, queue)
	a.NewServer(asynq.Config{Concurrency: workers})
	defer a.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, jobcell.AsynqDB, a.Keys()) }()
	if err := a.Backlog(ctx, jobs, func(i int) any { return benchArgs{I: i} }); err != nil {
		return e2eCell{}, err
	}
	handled := loadgen.NewCountdown(jobs)
	handler := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		handled.Add(1)
		return nil
	})

	w := redisstat.Window{Stats: e.stats, Sent: &a.Sent}
	if err := w.Start(ctx); err != nil {
		return e2eCell{}, err
	}
	t0 := time.Now()
	if err := a.Server.Start(handler); err != nil {
		return e2eCell{}, err
	}
	defer a.Shutdown()
	deadline := time.Now().Add(e.p.e2eLimit)
	limit := time.NewTimer(e.p.e2eLimit)
	defer limit.Stop()
	var tHandled, tDone time.Time
	select {
	case <-handled.Done():
		tHandled = time.Now()
	case <-limit.C:
	}
	var info *asynq.QueueInfo
	var err error
	for !tHandled.IsZero() && time.Now().Before(deadline) {
		info, err = a.Inspector.GetQueueInfo(queue)
		if err != nil {
			return e2eCell{}, err
		}
		if info.Active == 0 && info.ProcessedTotal >= jobs {
			tDone = time.Now()
			break
		}
		time.Sleep(time.Millisecond)
	}
	err = w.End(ctx)
	if tDone.IsZero() {
		return e2eCell{}, errors.Join(err, fmt.Errorf("not done within %v: %d handled", e.p.e2eLimit, handled.Count()))
	}
	for _, c := range []struct {
		what      string
		got, want int
	}{
		{"processed", info.ProcessedTotal, jobs}, {"failed", info.FailedTotal, 0}, {"in the queue", info.Size, 0},
		{"retry", info.Retry, 0}, {"archived", info.Archived, 0}, {"completed", info.Completed, 0},
	} {
		if c.got != c.want {
			err = errors.Join(err, fmt.Errorf("after the run: %d tasks %s, want %d", c.got, c.what, c.want))
		}
	}
	if n := handled.Count(); n != int64(jobs) {
		err = errors.Join(err, fmt.Errorf("handlers called %d times, want %d", n, jobs))
	}
	return e2eCell{jobs: int64(jobs), elapsed: tDone.Sub(t0), handled: tHandled.Sub(t0),
		redis: w.Delta, cpu: w.CPU}, err
}

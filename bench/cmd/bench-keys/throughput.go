package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// tpRow is one row of part 4.
type tpRow struct {
	name  string
	keyed bool
}

// tpCell is one round of one cell of part 4, or the sum of its rounds.
type tpCell struct {
	jobs    int64
	elapsed time.Duration
	redis   redisstat.Snap
	cpu     time.Duration
	drv     driverCounts
}

func (c *tpCell) add(o tpCell) {
	c.jobs += o.jobs
	c.elapsed += o.elapsed
	c.cpu += o.cpu
	c.redis.Add(o.redis)
	c.drv.add(o.drv)
}

// runThroughput is part 4: a backlog of no-op jobs worked off by a pool,
// the jobs spread over many keys with a limit, and the same jobs with no
// key; rows take turns round by round.
func runThroughput(ctx context.Context, e *env) error {
	p := e.p
	rows := []tpRow{
		{name: "no key"},
		{name: fmt.Sprintf("%d keys, limit %d", p.tpKeys, p.tpLimit), keyed: true},
	}
	fmt.Fprintf(os.Stderr, "part 4: throughput (%d jobs, %d workers, %d rounds)\n", p.tpJobs, p.tpWorkers, p.tpRounds)
	rates := map[string][]float64{}
	sums := map[string]*tpCell{}
	for round := range p.tpRounds {
		for ri, r := range rows {
			if !selected(r.name) {
				continue
			}
			fmt.Fprintf(os.Stderr, "  round %d/%d: %s\n", round+1, p.tpRounds, r.name)
			c, err := tpBaton(ctx, e, r, fmt.Sprintf("bkt%d-%d", ri, round))
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			rates[r.name] = append(rates[r.name], float64(c.jobs)/c.elapsed.Seconds())
			if sums[r.name] == nil {
				sums[r.name] = &tpCell{}
			}
			sums[r.name].add(c)
		}
	}
	t := &table.Table{
		Title: fmt.Sprintf("4. Throughput: a backlog of %d no-op jobs worked off by %d workers (median of %d rounds, rows interleaved)",
			p.tpJobs, p.tpWorkers, p.tpRounds),
		Header: []string{"jobs", "jobs/s", "rounds", "cmds/job", "server calls/job", "scripts/job", "script µs/job",
			"Redis CPU µs/job", "Redis CPU", "bench CPU µs/job", "jobs/fetch", "jobs/finish", "waits/job"},
	}
	var breakdown []string
	for _, r := range rows {
		s := sums[r.name]
		if s == nil {
			continue
		}
		jobs, secs := float64(s.jobs), s.elapsed.Seconds()
		redisstat.CheckCounters(&s.redis)
		t.Add(r.name, table.Rate(loadgen.Median(rates[r.name])), table.Range(rates[r.name]),
			table.Float(float64(s.redis.Client)/jobs, 2), table.Float(float64(s.redis.Total)/jobs, 1),
			table.Float(float64(scriptCalls(s.redis))/jobs, 3), table.Float(float64(scriptUsec(s.redis))/jobs, 1),
			table.Float(s.redis.CPU*1e6/jobs, 1), fmt.Sprintf("%.0f%%", 100*s.redis.CPU/secs),
			table.Float(s.cpu.Seconds()*1e6/jobs, 1),
			table.Float(float64(s.drv.fetched)/float64(max(s.drv.fetches, 1)), 1),
			table.Float(float64(s.drv.finished)/float64(max(s.drv.finishes, 1)), 1),
			table.Float(float64(s.drv.waits)/jobs, 2))
		if verbose {
			breakdown = append(breakdown, fmt.Sprintf("%s: %s", r.name, s.redis.Describe(s.jobs)))
		}
	}
	t.Note("jobs/s: the backlog over the time from starting the pool to the last outcome recorded in Redis.")
	t.Note("keyed: job i on key customer:(i mod %d), Limit %d, OnBusyWait: at the start %d jobs available, the rest parked.",
		p.tpKeys, p.tpLimit, min(p.tpJobs, p.tpKeys*p.tpLimit))
	t.Note("Baton's defaults but Concurrency (CompletedRetention 24h: completed jobs are kept).")
	t.Note("cmds/job: client-side count; server calls/job: INFO stats total_commands_processed growth; scripts/job:")
	t.Note("  FCALL/EVALSHA calls; script µs: their server time. Redis CPU / bench CPU: 100%% = one core.")
	t.Note("jobs/fetch, jobs/finish: jobs per JobFetch that returned any / per JobFinish; waits: JobWait (BLPOP) calls.")
	t.Print(os.Stdout)
	table.PrintBreakdown(os.Stdout, "4. per row (-v): server command calls per job x µs per call", breakdown)
	if nk, k := rates[rows[0].name], rates[rows[1].name]; len(nk) > 0 && len(k) > 0 {
		a, b := loadgen.Median(k), loadgen.Median(nk)
		e.goals.Add(a >= 0.8*b, "%s reach >= 80%% of the throughput with no key: %.0f / %.0f = %.0f%%", rows[1].name, a, b, 100*a/b)
	}
	return nil
}

// tpBaton runs one round of a part 4 cell on key prefix.
func tpBaton(ctx context.Context, e *env, r tpRow, prefix string) (tpCell, error) {
	p := e.p
	jobs := p.tpJobs
	b, err := newBatonSide(e.addr, prefix, p.tpWorkers, func(context.Context, *baton.Job[keyArgs]) error { return nil })
	if err != nil {
		return tpCell{}, err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	opts := func(int) *baton.InsertOpts { return nil }
	want := map[baton.JobState]int{baton.JobStateAvailable: jobs}
	if r.keyed {
		opts = func(int) *baton.InsertOpts { return keyed(p.tpLimit) }
		avail := min(jobs, p.tpKeys*p.tpLimit)
		want = map[baton.JobState]int{baton.JobStateAvailable: avail}
		if jobs > avail {
			want[baton.JobStateParked] = jobs - avail
		}
	}
	if err := b.insert(ctx, jobs, func(i int) int { return i % p.tpKeys }, opts); err != nil {
		return tpCell{}, err
	}
	if err := b.expect(ctx, want); err != nil {
		return tpCell{}, fmt.Errorf("after the insert: %w", err)
	}
	recorded := loadgen.NewCountdown(jobs)
	b.td.onRecorded.Store(recorded)
	w := redisstat.Window{Stats: e.stats, Sent: &b.Sent}
	if err := w.Start(ctx); err != nil {
		return tpCell{}, err
	}
	before := b.td.counts()
	t0 := time.Now()
	if err := b.client.Start(ctx); err != nil {
		return tpCell{}, err
	}
	ok := recorded.Wait(p.tpCap)
	elapsed := time.Since(t0)
	err = w.End(ctx)
	drv := b.td.counts().sub(before)
	err = errors.Join(err, b.stop(p.stopGrace))
	if !ok {
		return tpCell{}, errors.Join(err, fmt.Errorf("not done within %v: %d recorded", p.tpCap, b.td.recorded.Load()))
	}
	err = errors.Join(err, b.expect(ctx, map[baton.JobState]int{baton.JobStateCompleted: jobs}))
	return tpCell{jobs: int64(jobs), elapsed: elapsed, redis: w.Delta, cpu: w.CPU, drv: drv}, err
}

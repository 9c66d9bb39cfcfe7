package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// parkedWorkers is the worker pool of part 2.
const parkedWorkers = 16

// parkedWork is what each job of part 2 sleeps: as in part 1, so that every
// turn of the key is the same (with no-op jobs, whether the pool's second
// fetch after a job finds the next one depends on timing).
const parkedWork = time.Millisecond

// parkCell is the result of one cell of part 2.
type parkCell struct {
	n            int           // jobs inserted on the key
	warm, window int           // jobs run before the window, and in it
	insert       time.Duration // inserting the n jobs
	elapsed      time.Duration // the window
	redis        redisstat.Snap
	drv          driverCounts
}

// runParked is part 2: for each size, n jobs are inserted on one key of
// limit 1 (one available, the others parked), a pool of 16 workers starts,
// and the window runs from the start of job warm+1 to the start of job
// warm+window+1. The key lets one job run at a time, so those two handler
// starts bracket exactly window complete turns of the key: the job's
// finish, its successor's promotion, fetch and start. The handlers take the
// snapshots themselves.
func runParked(ctx context.Context, e *env) error {
	p := e.p
	fmt.Fprintf(os.Stderr, "part 2: commands per job with parked jobs (%v jobs on one key, windows of %d)\n", p.parked, p.parkWindow)
	t := &table.Table{
		Title: fmt.Sprintf("2. Commands per completed job with N jobs on one key of limit 1 (jobs of %v, %d workers)", parkedWork, parkedWorkers),
		Header: []string{"jobs on the key", "window", "parked in window", "jobs/s", "cmds/job", "server calls/job",
			"scripts/job", "script µs/job", "Redis CPU µs/job", "fetches/job", "waits/job", "insert jobs/s"},
	}
	var breakdown []string
	var calls []float64
	for _, n := range p.parked {
		name := fmt.Sprintf("parked %d", n)
		if !selected(name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "  %d jobs\n", n)
		c, err := parkedCell(ctx, e, n, fmt.Sprintf("bkp%d", n))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		w := float64(c.window)
		redisstat.CheckCounters(&c.redis)
		calls = append(calls, float64(c.redis.Total)/w)
		t.Add(fmt.Sprint(n), fmt.Sprint(c.window), fmt.Sprintf("%d..%d", n-c.warm-1, n-c.warm-c.window-1),
			table.Rate(w/c.elapsed.Seconds()),
			table.Float(float64(c.redis.Client)/w, 2), table.Float(float64(c.redis.Total)/w, 1),
			table.Float(float64(scriptCalls(c.redis))/w, 2), table.Float(float64(scriptUsec(c.redis))/w, 1),
			table.Float(c.redis.CPU*1e6/w, 1),
			table.Float(float64(c.drv.fetches)/w, 2), table.Float(float64(c.drv.waits)/w, 2),
			table.Rate(float64(n)/c.insert.Seconds()))
		if verbose {
			breakdown = append(breakdown, fmt.Sprintf("%d jobs: %s", n, c.redis.Describe(int64(c.window))))
		}
	}
	t.Note("jobs on the key: inserted before the pool starts (InsertMany, 1000 a call): one available, the rest parked.")
	t.Note("window: completed jobs measured, after %d unmeasured ones (fewer for small N); parked in window: how many", p.parkWarm)
	t.Note("  jobs were parked at its start and end. No job runs to completion beyond the window; the rest are deleted.")
	t.Note("cmds/job: client-side count; server calls/job: INFO stats total_commands_processed growth (redis.calls")
	t.Note("  inside scripts included); scripts/job: FCALL/EVALSHA calls; script µs: their server time (commandstats usec).")
	t.Note("fetches/job, waits/job: JobFetch and JobWait (BLPOP) calls of the pool, counted by a driver wrapper.")
	t.Note("insert jobs/s: the N keyed inserts, not measured in the window.")
	t.Print(os.Stdout)
	table.PrintBreakdown(os.Stdout, "2. per size (-v): server command calls per completed job x µs per call", breakdown)
	if len(calls) > 1 {
		lo, hi := slices.Min(calls), slices.Max(calls)
		e.goals.Add(hi <= 1.05*lo, "Redis commands per job flat in the number parked (within 5%%): %.1f..%.1f server calls/job", lo, hi)
	}
	return nil
}

// parkedCell runs one cell of part 2 on key prefix.
func parkedCell(ctx context.Context, e *env, n int, prefix string) (parkCell, error) {
	p := e.p
	warm := min(p.parkWarm, n/5)
	win := min(p.parkWindow, n-warm-1)
	var (
		b       *batonSide
		started atomic.Int64
		w       redisstat.Window
		first   loadgen.FirstError
		tw      time.Time
		elapsed time.Duration
		before  driverCounts
		drv     driverCounts
		ended   = loadgen.NewCountdown(1)
		mu      sync.Mutex // orders the two handlers' writes (they meet through Redis)
	)
	// The handler of the job that opens the window, and that of the first
	// job after it, snapshot the counters: no other job of the key runs
	// meanwhile.
	work := func(ctx context.Context, job *baton.Job[keyArgs]) error {
		defer time.Sleep(parkedWork)
		mu.Lock()
		defer mu.Unlock()
		switch started.Add(1) {
		case int64(warm + 1):
			w = redisstat.Window{Stats: e.stats, Sent: &b.Sent}
			if err := w.Start(ctx); err != nil {
				first.Set(err)
			}
			before, tw = b.td.counts(), time.Now()
		case int64(warm + win + 1):
			elapsed = time.Since(tw)
			drv = b.td.counts().sub(before)
			if err := w.End(ctx); err != nil {
				first.Set(err)
			}
			ended.Add(1)
		}
		return nil
	}
	b, err := newBatonSide(e.addr, prefix, parkedWorkers, work)
	if err != nil {
		return parkCell{}, err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	t0 := time.Now()
	if err := b.insert(ctx, n, func(int) int { return 7 }, func(int) *baton.InsertOpts { return keyed(1) }); err != nil {
		return parkCell{}, err
	}
	ins := time.Since(t0)
	if err := b.expect(ctx, map[baton.JobState]int{baton.JobStateAvailable: 1, baton.JobStateParked: n - 1}); err != nil {
		return parkCell{}, fmt.Errorf("after the insert: %w", err)
	}
	if err := b.client.Start(ctx); err != nil {
		return parkCell{}, err
	}
	ok := ended.Wait(p.parkLimit)
	err = b.stop(p.stopGrace)
	mu.Lock()
	defer mu.Unlock()
	if !ok {
		return parkCell{}, errors.Join(err, fmt.Errorf("window not done within %v: %d jobs started", p.parkLimit, started.Load()))
	}
	if first.Err != nil {
		return parkCell{}, errors.Join(err, first.Err)
	}
	return parkCell{n: n, warm: warm, window: win, insert: ins, elapsed: elapsed, redis: w.Delta, drv: drv}, err
}

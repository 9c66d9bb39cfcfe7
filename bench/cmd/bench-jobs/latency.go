package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// latWorkers is the worker pool size of the latency cells.
const latWorkers = 16

// The gap between two inserts of a latency cell is drawn uniformly from
// [latGapMin, latGapMax).
const (
	latGapMin = 2 * time.Millisecond
	latGapMax = 5 * time.Millisecond
)

// latRow is one row of the latency table.
type latRow struct {
	name      string
	asynq     bool
	taskCheck time.Duration // asynq's TaskCheckInterval (0: its default, 1s)
	tuned     bool
}

var latRows = []latRow{
	{name: "baton"},
	{name: "asynq", asynq: true},
	{name: "asynq (TaskCheckInterval 1ms)", asynq: true, taskCheck: time.Millisecond, tuned: true},
}

// latCell is the result of one latency cell.
type latCell struct {
	lat, call []time.Duration // insert-to-start, and the insert call itself
	idle      redisstat.Snap  // the counters' growth while the workers idled
	idleFor   time.Duration
	redis     redisstat.Snap // during the inserts
	window    time.Duration
}

// latSide is the part of a latency cell that differs between Baton and
// asynq.
type latSide struct {
	sent   *atomic.Int64
	insert func(ctx context.Context, i int) error
	stop   func()
}

// runLatency is part 3.
func runLatency(ctx context.Context, e *env) error {
	p := e.p
	fmt.Fprintf(os.Stderr, "part 3: insert-to-start latency (%d inserts per row, %v-%v apart, %d idle workers)\n",
		p.latInserts, latGapMin, latGapMax, latWorkers)
	t := &table.Table{
		Title: fmt.Sprintf("3. Insert-to-start latency with %d idle workers: %d single inserts, %v-%v apart",
			latWorkers, p.latInserts, latGapMin, latGapMax),
		Header: []string{"implementation", "p50", "p90", "p99", "max", "insert call p50",
			"idle: server calls/s", "idle: Redis CPU", "Redis CPU µs/job"},
	}
	baton50 := time.Duration(-1) // not run
	for ri, r := range selectedRows(latRows, func(r latRow) string { return r.name }) {
		fmt.Fprintf(os.Stderr, "  %s\n", r.name)
		c, err := latencyCell(ctx, e, r, fmt.Sprintf("bjl%d", ri), fmt.Sprintf("lat-%d", ri))
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		idleS := c.idleFor.Seconds()
		t.Add(r.name, table.Dur(loadgen.Percentile(c.lat, 0.5)), table.Dur(loadgen.Percentile(c.lat, 0.9)), table.Dur(loadgen.Percentile(c.lat, 0.99)),
			table.Dur(loadgen.Percentile(c.lat, 1)), table.Dur(loadgen.Percentile(c.call, 0.5)),
			table.Rate(float64(c.idle.Total)/idleS), fmt.Sprintf("%.1f%%", 100*c.idle.CPU/idleS),
			table.Float(c.redis.CPU*1e6/float64(len(c.lat)), 1))
		if r.name == "baton" {
			baton50 = loadgen.Percentile(c.lat, 0.5)
		}
	}
	t.Note("latency: from just before the insert call to the start of the handler, in this process.")
	t.Note("insert call: the insert call alone. idle: the last %v of the %v the workers idled before the first insert,",
		p.latIdle*3/4, p.latIdle)
	t.Note("server calls per second (INFO stats total_commands_processed) and Redis CPU (100%% = one core).")
	t.Note("Redis CPU µs/job: server CPU during the inserts, per job, idle polling included.")
	t.Note("asynq polls: a processor that finds its queues empty sleeps TaskCheckInterval/2 plus up to")
	t.Note("TaskCheckInterval at random (default 1s) before it asks again; the second asynq row sets 1ms,")
	t.Note("which its documentation warns \"may add significant load to redis\".")
	t.Print(os.Stdout)
	if baton50 >= 0 {
		e.goals.Add(baton50 <= 2*time.Millisecond, "insert-to-start p50 with idle workers <= 2ms: %s", table.Dur(baton50))
	}
	return nil
}

// latencyCell starts a pool of idle workers, lets it idle for p.latIdle,
// then inserts p.latInserts jobs one at a time with random gaps and
// measures when each one's handler starts.
func latencyCell(ctx context.Context, e *env, r latRow, prefix, queue string) (latCell, error) {
	p := e.p
	n := p.latInserts
	sentAt := make([]atomic.Int64, n) // ns since base, before the insert call
	startAt := make([]atomic.Int64, n)
	base := time.Now()
	started := loadgen.NewCountdown(n)
	mark := func(i int) {
		if i >= 0 && i < n && startAt[i].CompareAndSwap(0, int64(time.Since(base))) {
			started.Add(1)
		}
	}

	var s latSide
	if r.asynq {
		a := jobcell.NewAsynq(e.addr, queue)
		a.NewServer(asynq.Config{Concurrency: latWorkers, TaskCheckInterval: r.taskCheck})
		defer a.Close()
		defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, jobcell.AsynqDB, a.Keys()) }()
		err := a.Server.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			var args benchArgs
			if err := json.Unmarshal(t.Payload(), &args); err != nil {
				return err
			}
			mark(args.I)
			return nil
		}))
		if err != nil {
			return latCell{}, err
		}
		s = latSide{sent: &a.Sent, stop: a.Shutdown, insert: func(ctx context.Context, i int) error {
			return a.Enqueue(ctx, benchArgs{I: i})
		}}
	} else {
		work := func(ctx context.Context, job *baton.Job[benchArgs]) error {
			mark(job.Args.I)
			return nil
		}
		b, err := newBatonSide(e.addr, prefix, &baton.Config{Concurrency: latWorkers}, work)
		if err != nil {
			return latCell{}, err
		}
		defer b.Close()
		defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
		if err := b.client.Start(ctx); err != nil {
			return latCell{}, err
		}
		s = latSide{sent: &b.Sent, stop: func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), p.stopGrace)
			defer cancel()
			_ = b.client.Stop(stopCtx)
		}, insert: func(ctx context.Context, i int) error {
			_, err := b.client.Insert(ctx, benchArgs{I: i}, nil)
			return err
		}}
	}
	defer s.stop()

	// Idle: let the pool settle, then measure what idling costs.
	time.Sleep(p.latIdle / 4)
	var c latCell
	w := redisstat.Window{Stats: e.stats, Sent: s.sent}
	if err := w.Start(ctx); err != nil {
		return c, err
	}
	t0 := time.Now()
	time.Sleep(p.latIdle * 3 / 4)
	if err := w.End(ctx); err != nil {
		return c, err
	}
	c.idle, c.idleFor = w.Delta, time.Since(t0)

	w = redisstat.Window{Stats: e.stats, Sent: s.sent}
	if err := w.Start(ctx); err != nil {
		return c, err
	}
	t0 = time.Now()
	c.call = make([]time.Duration, 0, n)
	for i := range n {
		time.Sleep(latGapMin + rand.N(latGapMax-latGapMin))
		before := time.Since(base)
		sentAt[i].Store(int64(before))
		if err := s.insert(ctx, i); err != nil {
			return c, fmt.Errorf("insert %d: %w", i, err)
		}
		c.call = append(c.call, time.Since(base)-before)
	}
	var err error
	select {
	case <-started.Done():
	case <-time.After(p.stopGrace):
		err = fmt.Errorf("only %d of %d jobs started within %v of the last insert", started.Count(), n, p.stopGrace)
	}
	c.window = time.Since(t0)
	err = errors.Join(err, w.End(ctx))
	c.redis = w.Delta
	for i := range n {
		if st := startAt[i].Load(); st != 0 {
			c.lat = append(c.lat, time.Duration(st-sentAt[i].Load()))
		}
	}
	return c, err
}

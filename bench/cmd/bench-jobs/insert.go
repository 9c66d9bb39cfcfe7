package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/goals"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/machine"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// insertGoroutines are the columns of the insert table.
var insertGoroutines = []int{1, 16}

// maxInsertCalls bounds every inserting goroutine's loop besides its clock.
const maxInsertCalls = 1 << 22

// insertRow is one row of the insert table: Baton with batches of batch
// jobs (1: Insert, one at a time; more: InsertMany), or asynq's Enqueue.
type insertRow struct {
	name  string
	asynq bool
	batch int
}

var insertRows = []insertRow{
	{name: "baton Insert", batch: 1},
	{name: "baton InsertMany x100", batch: 100},
	{name: "baton InsertMany x1000", batch: 1000},
	{name: "asynq Enqueue", asynq: true, batch: 1},
}

// insertCell is one round of one insert cell, or the sum of its rounds.
type insertCell struct {
	jobs   int64
	window time.Duration
	errs   int64
	first  error
	redis  redisstat.Snap
	cpu    time.Duration
}

func (c insertCell) rate() float64 { return float64(c.jobs) / c.window.Seconds() }

func (c *insertCell) add(o insertCell) {
	c.jobs += o.jobs
	c.window += o.window
	c.errs += o.errs
	c.cpu += o.cpu
	if c.first == nil {
		c.first = o.first
	}
	c.redis.Add(o.redis)
}

// runInsert is part 1. The rows take turns round by round, so a slow spell
// of the machine hits every row alike; the table shows the median round.
func runInsert(ctx context.Context, e *env) error {
	p := e.p
	fmt.Fprintf(os.Stderr, "part 1: inserts (%d rounds of %v per cell, each after %v warm-up)\n", p.insRounds, p.insWindow, p.insWarm)
	rows := selectedRows(insertRows, func(r insertRow) string { return r.name })
	rates := map[string]map[int][]float64{}
	sums := map[string]map[int]*insertCell{}
	for _, r := range rows {
		rates[r.name] = map[int][]float64{}
		sums[r.name] = map[int]*insertCell{}
		for _, n := range insertGoroutines {
			sums[r.name][n] = &insertCell{}
		}
	}
	cell := 0
	for _, n := range insertGoroutines {
		for round := range p.insRounds {
			fmt.Fprintf(os.Stderr, "  %2d goroutines, round %d/%d\n", n, round+1, p.insRounds)
			for ri, r := range rows {
				cell++
				c, err := insertRound(ctx, e, r, n, fmt.Sprintf("bj%d", cell), fmt.Sprintf("ins-%d-%d-%d", ri, n, round))
				if err != nil {
					return fmt.Errorf("%s, %d goroutines: %w", r.name, n, err)
				}
				rates[r.name][n] = append(rates[r.name][n], c.rate())
				sums[r.name][n].add(c)
			}
		}
	}

	t := &table.Table{
		Title: fmt.Sprintf("1. Inserts/s of available no-op jobs (median of %d rounds of %v, rows interleaved)",
			p.insRounds, p.insWindow),
		Header: []string{"implementation", "1 g", "16 g", "rounds at 1 g", "rounds at 16 g",
			"cmds/job", "server calls/job", "Redis CPU µs/job", "Redis CPU", "bench CPU µs/job", "bench CPU", "errors"},
	}
	var breakdown []string
	for _, r := range rows {
		cells := []string{r.name}
		var errs int64
		for _, n := range insertGoroutines {
			cells = append(cells, table.Rate(loadgen.Median(rates[r.name][n])))
			s := sums[r.name][n]
			errs += s.errs
			if s.first != nil {
				t.Note("%s, %d goroutines: first error: %v", r.name, n, s.first)
			}
			if verbose {
				breakdown = append(breakdown, fmt.Sprintf("%s, %d g: %s", r.name, n, s.redis.Describe(s.jobs)))
			}
		}
		s := sums[r.name][16]
		jobs, secs := float64(s.jobs), s.window.Seconds()
		redisstat.CheckCounters(&s.redis)
		cells = append(cells, table.Range(rates[r.name][1]), table.Range(rates[r.name][16]),
			table.Float(float64(s.redis.Client)/jobs, 3),
			table.Float(float64(s.redis.Total)/jobs, 2),
			table.Float(s.redis.CPU*1e6/jobs, 2),
			fmt.Sprintf("%.0f%%", 100*s.redis.CPU/secs),
			table.Float(s.cpu.Seconds()*1e6/jobs, 2),
			fmt.Sprintf("%.0f%%", 100*s.cpu.Seconds()/secs),
			fmt.Sprint(errs))
		t.Add(cells...)
	}
	t.Add("asynq (batch)", "-", "-", "", "", "", "", "", "", "", "", "")
	t.Note("g: goroutines, each inserting one call after the other. Baton's Insert is InsertMany of one job.")
	t.Note("asynq (batch): asynq %s has no batch enqueue (its Client has Enqueue and EnqueueContext only).", machine.ModuleVersion("github.com/hibiken/asynq"))
	t.Note("cmds/job:         commands the clients sent per job, counted client-side; Baton's insert is one")
	t.Note("                  FCALL (a process's first into a queue pipelines an SADD of its name). At 16 goroutines.")
	t.Note("server calls/job: INFO stats total_commands_processed growth per job: client commands PLUS every")
	t.Note("                  redis.call inside scripts (Redis 7.0 counts both). At 16 goroutines.")
	t.Note("Redis CPU:        server used_cpu_user+used_cpu_sys in the 16-goroutine windows (100%% = one core).")
	t.Note("bench CPU:        CPU time of this process (the inserting clients) in the same windows.")

	t.Print(os.Stdout)
	if only == nil {
		insertGoals(e.goals, func(name string, n int) float64 { return loadgen.Median(rates[name][n]) })
	}
	table.PrintBreakdown(os.Stdout, "1. per cell (-v): server command calls per job x µs per call", breakdown)
	return nil
}

// insertGoals adds the goals on inserts; med(row, goroutines) is a
// cell's median rate.
func insertGoals(g *goals.List, med func(string, int) float64) {
	a1, a16 := med("asynq Enqueue", 1), med("asynq Enqueue", 16)
	b1, b16 := med("baton Insert", 1), med("baton Insert", 16)
	g.Add(b1 >= a1, "inserts, 1 goroutine one at a time: baton >= asynq: %.0f / %.0f = %.2fx", b1, a1, b1/a1)
	g.Add(b16 >= 2*a16, "inserts, 16 goroutines one at a time: baton >= 2x asynq at 16: %.0f / %.0f = %.2fx", b16, a16, b16/a16)
	for _, name := range []string{"baton InsertMany x100", "baton InsertMany x1000"} {
		for _, n := range insertGoroutines {
			v := med(name, n)
			g.Add(v >= 2*a16, "inserts, %s from %d goroutine(s) >= 2x asynq at 16: %.0f / %.0f = %.2fx", name, n, v, a16, v/a16)
		}
	}
}

// selectedRows returns the rows whose name -only lets run.
func selectedRows[R any](rows []R, name func(R) string) []R {
	var out []R
	for _, r := range rows {
		if selected(name(r)) {
			out = append(out, r)
		}
	}
	return out
}

// insertRound runs one round of one insert cell: n goroutines insert for
// p.insWarm unmeasured, then p.insWindow measured. Baton's cell uses key
// prefix, asynq's queue; their keys are deleted afterwards.
func insertRound(ctx context.Context, e *env, r insertRow, n int, prefix, queue string) (insertCell, error) {
	p := e.p
	ctx, cancel := context.WithTimeout(ctx, p.insWarm+p.insWindow+p.stopGrace)
	defer cancel()

	var (
		op      func(ctx context.Context, g, i int) error // goroutine g's call number i
		sent    *atomic.Int64
		cleanup func() error
	)
	if r.asynq {
		a := jobcell.NewAsynq(e.addr, queue)
		defer a.Close()
		op = func(ctx context.Context, g, i int) error { return a.Enqueue(ctx, benchArgs{I: g<<22 | i}) }
		sent = &a.Sent
		cleanup = func() error {
			_, err := redisstat.DeleteKeys(context.Background(), e.addr, jobcell.AsynqDB, a.Keys())
			return err
		}
	} else {
		b, err := newBatonSide(e.addr, prefix, nil, nil)
		if err != nil {
			return insertCell{}, err
		}
		defer b.Close()
		batches := make([][]*baton.InsertManyParams, n)
		for g := range n {
			batches[g] = make([]*baton.InsertManyParams, r.batch)
			for j := range batches[g] {
				batches[g][j] = &baton.InsertManyParams{Args: benchArgs{I: j}}
			}
		}
		if r.batch == 1 {
			op = func(ctx context.Context, g, i int) error {
				_, err := b.client.Insert(ctx, benchArgs{I: g<<22 | i}, nil)
				return err
			}
		} else {
			op = func(ctx context.Context, g, i int) error {
				_, err := b.client.InsertMany(ctx, batches[g])
				return err
			}
		}
		sent = &b.Sent
		cleanup = func() error { _, err := redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()); return err }
	}

	var (
		stop   atomic.Bool
		counts = make([]loadgen.Counter, n)
		errs   atomic.Int64
		first  loadgen.FirstError
		wg     sync.WaitGroup
	)
	for g := range n {
		wg.Go(func() {
			for i := 0; i < maxInsertCalls && !stop.Load() && ctx.Err() == nil; i++ {
				if err := op(ctx, g, i); err != nil {
					errs.Add(1)
					first.Set(err)
					continue
				}
				counts[g].Add(int64(r.batch))
			}
		})
	}
	sum := func() (s int64) {
		for i := range counts {
			s += counts[i].Load()
		}
		return s
	}

	time.Sleep(p.insWarm)
	w := redisstat.Window{Stats: e.stats, Sent: sent}
	err := w.Start(ctx)
	before, t0 := sum(), time.Now()
	time.Sleep(p.insWindow)
	after, t1 := sum(), time.Now()
	err = errors.Join(err, w.End(ctx))
	stop.Store(true)
	if !loadgen.WaitGroup(&wg, p.stopGrace) {
		cancel()
		err = errors.Join(err, fmt.Errorf("%d goroutines did not stop within %v", n, p.stopGrace))
	}
	err = errors.Join(err, cleanup())
	return insertCell{
		jobs: after - before, window: t1.Sub(t0), errs: errs.Load(), first: first.Err,
		redis: w.Delta, cpu: w.CPU,
	}, err
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/bench/internal/cmdcount"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// runScripts is part 4, for diagnosis: the server cost of Baton's insert,
// fetch and finish scripts per job, each run alone through the driver
// (no Client), one call after the other, so that INFO commandstats'
// fcall entry holds that script only.
func runScripts(ctx context.Context, e *env) error {
	jobs := e.p.scriptJobs
	fmt.Fprintf(os.Stderr, "part 4: Baton's scripts alone (%d jobs per step)\n", jobs)
	b, err := newBatonSide(e.addr, "bjs", nil, nil)
	if err != nil {
		return err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	drv := b.Driver
	args, _ := json.Marshal(benchArgs{I: 1})
	inserts := func(n int) []*batondriver.JobInsert {
		out := make([]*batondriver.JobInsert, n)
		for i := range out {
			out[i] = &batondriver.JobInsert{Kind: "bench", Args: args, Priority: 1, MaxAttempts: 25}
		}
		return out
	}

	t := &table.Table{
		Title: fmt.Sprintf("4. Baton's scripts alone, one call after the other (%d jobs per step)", jobs),
		Header: []string{"step", "calls", "jobs/call", "script µs/call", "script µs/job",
			"server calls/job", "Redis CPU µs/job", "RTT"},
	}
	// step runs call until it has handled n jobs (or made maxCalls calls)
	// and adds a row.
	step := func(name string, n int, call func() (int, error)) error {
		w := redisstat.Window{Stats: e.stats, Sent: &b.Sent}
		if err := w.Start(ctx); err != nil {
			return err
		}
		t0 := time.Now()
		done, calls := 0, 0
		for done < n && calls < 10*n {
			k, err := call()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			done += k
			calls++
		}
		rtt := time.Since(t0) / time.Duration(max(calls, 1))
		if err := w.End(ctx); err != nil {
			return err
		}
		ev := w.Delta.Scripts()
		fd := float64(done)
		t.Add(name, fmt.Sprint(calls), table.Float(fd/float64(calls), 1),
			table.Float(float64(ev.Usec)/float64(max(ev.Calls, 1)), 1), table.Float(float64(ev.Usec)/fd, 2),
			table.Float(float64(w.Delta.Total)/fd, 1), table.Float(w.Delta.CPU*1e6/fd, 1), table.Dur(rtt))
		return nil
	}

	for _, k := range []int{1, 100, 1000} {
		q := fmt.Sprintf("ins%d", k)
		err := step(fmt.Sprintf("insert x%d", k), jobs, func() (int, error) {
			_, err := drv.JobInsert(ctx, &batondriver.JobInsertParams{Queue: q, Jobs: inserts(k)})
			return k, err
		})
		if err != nil {
			return err
		}
	}

	// Fetch from a backlog, keeping the leases for the finish steps.
	const fq = "fetch"
	fetchSizes := []int{1, 16, 64, 100}
	for range len(fetchSizes)*jobs/1000 + 1 { // one batch to spare: a fetch may overshoot its step
		if _, err := drv.JobInsert(ctx, &batondriver.JobInsertParams{Queue: fq, Jobs: inserts(1000)}); err != nil {
			return err
		}
	}
	var leases []batondriver.JobLease
	for _, k := range fetchSizes {
		err := step(fmt.Sprintf("fetch Max %d", k), jobs, func() (int, error) {
			res, err := drv.JobFetch(ctx, &batondriver.JobFetchParams{Queue: fq, Max: k, LeaseTTL: 5 * time.Minute})
			if err != nil {
				return 0, err
			}
			for _, j := range res.Jobs {
				leases = append(leases, batondriver.JobLease{ID: j.ID, Lease: j.Lease})
			}
			if len(res.Jobs) == 0 {
				return 0, fmt.Errorf("backlog empty")
			}
			return len(res.Jobs), nil
		})
		if err != nil {
			return err
		}
	}

	// Finish the fetched jobs as completed, in batches of k, kept for 24h
	// (Baton's default) and deleted at once.
	for _, f := range []struct {
		k         int
		retention time.Duration
	}{{1, 24 * time.Hour}, {16, 24 * time.Hour}, {64, 24 * time.Hour}, {16, 0}, {64, 0}} {
		n := min(jobs*4/5, len(leases))
		name := fmt.Sprintf("finish x%d, retention 24h", f.k)
		if f.retention == 0 {
			name = fmt.Sprintf("finish x%d, retention 0", f.k)
		}
		err := step(name, n, func() (int, error) {
			k := min(f.k, len(leases))
			if k == 0 {
				return 0, fmt.Errorf("no leases left")
			}
			fs := make([]*batondriver.JobFinish, k)
			for i := range fs {
				fs[i] = &batondriver.JobFinish{JobLease: leases[i], Outcome: batondriver.JobOutcomeCompleted}
			}
			leases = leases[k:]
			res, err := drv.JobFinish(ctx, &batondriver.JobFinishParams{Queue: fq, Finished: fs, Retention: f.retention})
			if err == nil && len(res.Stale) > 0 {
				err = fmt.Errorf("%d stale outcomes", len(res.Stale))
			}
			return k, err
		})
		if err != nil {
			return err
		}
	}
	t.Note("script µs: INFO commandstats usec of FCALL (and EVALSHA), the whole transition including its redis.calls.")
	t.Note("server calls/job: INFO stats total_commands_processed growth per job (including in-script calls).")
	t.Note("RTT: mean time of one driver call as the client saw it.")
	t.Note("Fetches here find no due scheduled job, no expired lease and no completed job past retention.")
	t.Print(os.Stdout)
	if err := roundTripFloor(ctx, e); err != nil {
		return err
	}
	return insertFloor(ctx, e)
}

// roundTripFloor prints what one goroutine's PING costs on each client: the
// floor under every one-at-a-time figure of part 1. The clients take turns,
// floorRounds rounds of floorPings each, and the median round is shown: a
// single goroutine's round trip on this VM swings by 2-3x from one second
// to the next.
func roundTripFloor(ctx context.Context, e *env) error {
	const floorRounds, floorPings = 7, 1000
	t := &table.Table{
		Title: fmt.Sprintf("4b. The floor of one goroutine: PINGs one after the other on each client (median of %d rounds of %d, clients interleaved)",
			floorRounds, floorPings),
		Header: []string{"client", "round trip", "rounds", "bench CPU µs/ping"},
	}
	var n atomic.Int64
	rc, err := cmdcount.NewRueidis(e.addr, &n)
	if err != nil {
		return err
	}
	defer rc.Close()
	gr := cmdcount.NewGoRedis(e.addr, 0, nil)
	defer gr.Close()
	clients := []struct {
		name string
		ping func() error
	}{
		{"rueidis (Baton's)", func() error { return rc.Do(ctx, rc.B().Ping().Build()).Error() }},
		{"go-redis (asynq's)", func() error { return gr.Ping(ctx).Err() }},
	}
	rtts := make([][]float64, len(clients)) // µs, per round
	cpus := make([][]float64, len(clients))
	for round := range floorRounds + 1 {
		for i, c := range clients {
			cpu0, t0 := loadgen.ProcessCPU(), time.Now()
			for range floorPings {
				if err := c.ping(); err != nil {
					return err
				}
			}
			if round == 0 {
				continue // warm-up
			}
			rtts[i] = append(rtts[i], float64(time.Since(t0).Microseconds())/floorPings)
			cpus[i] = append(cpus[i], (loadgen.ProcessCPU()-cpu0).Seconds()*1e6/floorPings)
		}
	}
	for i, c := range clients {
		t.Add(c.name, table.Float(loadgen.Median(rtts[i]), 1)+"µs", table.Float(slices.Min(rtts[i]), 0)+".."+table.Float(slices.Max(rtts[i]), 0)+"µs",
			table.Float(loadgen.Median(cpus[i]), 1))
	}
	t.Print(os.Stdout)
	return nil
}

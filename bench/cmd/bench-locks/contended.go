package main

import (
	"context"
	"fmt"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
	"os"
	"slices"
	"time"
)

// handoffSpec is one contended cell.
type handoffSpec struct {
	name    string
	waiters int
	make    func() (*impl, error)
}

// runContended is part 2.
func runContended(ctx context.Context, p plan, addr string, stats *redisstat.Reader) error {
	fmt.Fprintf(os.Stderr, "part 2: contended handoff (%v per cell after %v warm-up)\n", p.handoff, p.handWarm)
	baton := func() (*impl, error) { return newBatonRedis("baton", addr, nil) }
	specs := []handoffSpec{
		{"baton", 8, baton},
		{"baton", 64, baton},
		{"baton", 512, baton},
		{"redislock", 64, func() (*impl, error) { return newRedislock(addr), nil }},
		{"redsync", 64, func() (*impl, error) { return newRedsync(addr), nil }},
		{"rueidislock (defaults)", 64, func() (*impl, error) { return newRueidislock("rueidislock (defaults)", addr, 0) }},
	}
	var cells []handoffCell
	var breakdown []string
	for i, s := range specs {
		if !selected(s.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "  %-24s %3d goroutines\n", s.name, s.waiters)
		im, err := s.make()
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		c, err := runHandoff(ctx, p, im, s.waiters, fmt.Sprintf("bench:handoff:%d", i), stats)
		im.close()
		if err != nil {
			return err
		}
		cells = append(cells, c)
		if verbose && c.redis != nil {
			breakdown = append(breakdown, fmt.Sprintf("%s, %d g: %s", c.name, c.waiters, c.redis.Describe(c.acquired)))
		}
	}
	printHandoff(os.Stdout, "2. Contended handoff on Redis", p, cells)
	table.PrintBreakdown(os.Stdout, "2. server commands per acquisition (-v)", breakdown)

	// Goals, for Baton's cells.
	var notes []string
	var perAcq []float64
	for _, c := range cells {
		if c.name != "baton" {
			continue
		}
		pct := 100 * c.rate() / c.ideal()
		p99 := loadgen.Percentile(c.waits, 0.99)
		p99Goal := time.Duration(float64(c.waiters) * 1.5 * float64(section))
		lo, hi, mean := spread(c.perG)
		fair := float64(lo) >= 0.8*mean && float64(hi) <= 1.2*mean
		g99 := loadgen.Percentile(c.grants, 0.99)
		notes = append(notes,
			fmt.Sprintf("goal: baton %3d waiters: throughput >= 90%% of ideal: %.1f%%  -> %s", c.waiters, pct, table.Verdict(pct >= 90)),
			fmt.Sprintf("goal: baton %3d waiters: p99 wait <= 1.5 x %d x 1ms = %s: %s  -> %s (%.2f x N x the measured %s section)",
				c.waiters, c.waiters, table.Dur(p99Goal), table.Dur(p99), table.Verdict(p99 <= p99Goal), float64(p99)/float64(c.waiters)/float64(c.sectionMean), table.Dur(c.sectionMean)),
			fmt.Sprintf("goal: baton %3d waiters: every goroutine within +-20%% of the mean (%.1f): %d..%d  -> %s", c.waiters, mean, lo, hi, table.Verdict(fair)),
			fmt.Sprintf("goal: baton %3d waiters: p99 release-to-grant <= 5ms: %s  -> %s", c.waiters, table.Dur(g99), table.Verdict(g99 <= 5*time.Millisecond)),
		)
		if c.redis != nil && c.acquired > 0 {
			perAcq = append(perAcq, float64(c.redis.Client)/float64(c.acquired))
		}
	}
	if len(perAcq) > 0 {
		lo, hi := slices.Min(perAcq), slices.Max(perAcq)
		notes = append(notes, fmt.Sprintf("goal: baton client commands per acquisition constant across 8/64/512 waiters (within 2%%): %.2f..%.2f  -> %s",
			lo, hi, table.Verdict(hi <= lo*1.02)))
	}
	for _, n := range notes {
		fmt.Println(n)
	}
	fmt.Println()
	return nil
}

// printHandoff prints the two tables of a set of contended cells.
func printHandoff(w *os.File, title string, p plan, cells []handoffCell) {
	hasRedis := slices.ContainsFunc(cells, func(c handoffCell) bool { return c.redis != nil })
	t1 := &table.Table{
		Title: fmt.Sprintf("%s: one key, limit 1, each goroutine loops acquire (blocking) / %s / release; %v measured after %v warm-up", title, sectionKind(), p.handoff, p.handWarm),
		Header: []string{"implementation", "goroutines", "sections/s", "mean section",
			"ideal/s", "% of ideal", "failed acquires"},
	}
	if hasRedis {
		t1.Header = append(t1.Header, "cmds/acq", "server calls/acq", "Redis CPU µs/acq")
	}
	t1.Header = append(t1.Header, "bench CPU µs/acq")
	t2 := &table.Table{
		Title: title + ": latency and fairness",
		Header: []string{"implementation", "goroutines", "wait p50", "wait p99", "1.5 x N x 1ms",
			"sections/goroutine min..max", "min/max vs mean", "release-to-grant p50", "p99", "Release call p50"},
	}
	var pings []string
	for _, c := range cells {
		row := []string{c.name, fmt.Sprint(c.waiters), table.Rate(c.rate()), table.Dur(c.sectionMean),
			table.Rate(c.ideal()), fmt.Sprintf("%.1f%%", 100*c.rate()/c.ideal()), fmt.Sprint(c.failed)}
		if hasRedis {
			if r := c.redis; r != nil && c.acquired > 0 {
				n := float64(c.acquired)
				redisstat.CheckCounters(r)
				row = append(row, table.Float(float64(r.Client)/n, 2), table.Float(float64(r.Total)/n, 1), table.Float(r.CPU*1e6/n, 1))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		row = append(row, table.Float(c.cpu.Seconds()*1e6/float64(max(c.acquired, 1)), 1))
		t1.Add(row...)
		lo, hi, mean := spread(c.perG)
		t2.Add(c.name, fmt.Sprint(c.waiters),
			table.Dur(loadgen.Percentile(c.waits, 0.5)), table.Dur(loadgen.Percentile(c.waits, 0.99)),
			table.Dur(time.Duration(float64(c.waiters)*1.5*float64(section))),
			fmt.Sprintf("%d..%d (mean %.1f)", lo, hi, mean),
			fmt.Sprintf("%s / %s", table.Pct(100*(float64(lo)-mean)/mean), table.Pct(100*(float64(hi)-mean)/mean)),
			table.Dur(loadgen.Percentile(c.grants, 0.5)), table.Dur(loadgen.Percentile(c.grants, 0.99)),
			table.Dur(loadgen.Percentile(c.releases, 0.5)))
		if len(c.pings) > 0 {
			pings = append(pings, fmt.Sprintf("%s, %d goroutines: PING round trip p50 %s, p99 %s (%d pings)",
				c.name, c.waiters, table.Dur(loadgen.Percentile(c.pings, 0.5)), table.Dur(loadgen.Percentile(c.pings, 0.99)), len(c.pings)))
		}
		if c.firstErr != nil {
			t1.Note("%s, %d goroutines: first error: %v", c.name, c.waiters, c.firstErr)
		}
	}
	t1.Note("sections/s: acquisitions returned in the window per second; each is followed by one 1ms section.")
	if busySection {
		t1.Note("mean section: measured length of the busy-waited critical section; ideal/s = 1 / mean section.")
	} else {
		t1.Note("mean section: measured length of the critical section (time.Sleep(1ms) overshoots); ideal/s = 1 / mean section.")
	}
	t1.Note("failed acquires: blocking acquires that returned an error in the window.")
	t1.Note("bench CPU: CPU time of this benchmark process (all its goroutines) per acquisition.")
	if hasRedis {
		t1.Note("cmds/acq: commands the clients sent per acquisition, counted client-side; includes the release and failed polls.")
		t1.Note("server calls/acq: INFO stats total_commands_processed growth per acquisition: client commands plus every")
		t1.Note("redis.call inside scripts (Redis 7.0 counts both; the INFO commandstats calls sum agrees).")
	}
	t2.Note("wait: Acquire call to return. release-to-grant: previous holder calling Release to the next Acquire returning.")
	t2.Note("Release call: Release call to return.")
	t2.Note("min/max vs mean: the fewest and most sections one goroutine got, relative to the mean over goroutines.")
	if len(pings) > 0 {
		t2.Note("")
		t2.Note("The floor: a PING every 5ms on an otherwise idle connection during each window (not counted above):")
		for _, p := range pings {
			t2.Note("  %s", p)
		}
	}
	t1.Print(w)
	t2.Print(w)
}

// sectionKind names the critical section in titles.
func sectionKind() string {
	if busySection {
		return "busy-wait 1ms"
	}
	return "time.Sleep(1ms)"
}

package main

import (
	"context"
	"fmt"
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
func runContended(ctx context.Context, p plan, addr string, stats *statsReader) error {
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
			breakdown = append(breakdown, fmt.Sprintf("%s, %d g: %s", c.name, c.waiters, c.redis.describe(c.acquired)))
		}
	}
	printHandoff(os.Stdout, "2. Contended handoff on Redis", p, cells)
	printBreakdown("2. server commands per acquisition (-v)", breakdown)

	// Goals, for Baton's cells.
	var notes []string
	var perAcq []float64
	for _, c := range cells {
		if c.name != "baton" {
			continue
		}
		pct := 100 * c.rate() / c.ideal()
		p99 := percentile(c.waits, 0.99)
		p99Goal := time.Duration(float64(c.waiters) * 1.5 * float64(section))
		lo, hi, mean := spread(c.perG)
		fair := float64(lo) >= 0.8*mean && float64(hi) <= 1.2*mean
		g99 := percentile(c.grants, 0.99)
		notes = append(notes,
			fmt.Sprintf("goal: baton %3d waiters: throughput >= 90%% of ideal: %.1f%%  -> %s", c.waiters, pct, verdict(pct >= 90)),
			fmt.Sprintf("goal: baton %3d waiters: p99 wait <= 1.5 x %d x 1ms = %s: %s  -> %s (%.2f x N x the measured %s section)",
				c.waiters, c.waiters, fmtDur(p99Goal), fmtDur(p99), verdict(p99 <= p99Goal), float64(p99)/float64(c.waiters)/float64(c.sectionMean), fmtDur(c.sectionMean)),
			fmt.Sprintf("goal: baton %3d waiters: every goroutine within +-20%% of the mean (%.1f): %d..%d  -> %s", c.waiters, mean, lo, hi, verdict(fair)),
			fmt.Sprintf("goal: baton %3d waiters: p99 release-to-grant <= 5ms: %s  -> %s", c.waiters, fmtDur(g99), verdict(g99 <= 5*time.Millisecond)),
		)
		if c.redis != nil && c.acquired > 0 {
			perAcq = append(perAcq, float64(c.redis.client)/float64(c.acquired))
		}
	}
	if len(perAcq) > 0 {
		lo, hi := slices.Min(perAcq), slices.Max(perAcq)
		notes = append(notes, fmt.Sprintf("goal: baton client commands per acquisition constant across 8/64/512 waiters (within 2%%): %.2f..%.2f  -> %s",
			lo, hi, verdict(hi <= lo*1.02)))
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
	t1 := &table{
		title: fmt.Sprintf("%s: one key, limit 1, each goroutine loops acquire (blocking) / %s / release; %v measured after %v warm-up", title, sectionKind(), p.handoff, p.handWarm),
		header: []string{"implementation", "goroutines", "sections/s", "mean section",
			"ideal/s", "% of ideal", "failed acquires"},
	}
	if hasRedis {
		t1.header = append(t1.header, "cmds/acq", "server calls/acq", "Redis CPU µs/acq")
	}
	t1.header = append(t1.header, "bench CPU µs/acq")
	t2 := &table{
		title: title + ": latency and fairness",
		header: []string{"implementation", "goroutines", "wait p50", "wait p99", "1.5 x N x 1ms",
			"sections/goroutine min..max", "min/max vs mean", "release-to-grant p50", "p99", "Release call p50"},
	}
	var pings []string
	for _, c := range cells {
		row := []string{c.name, fmt.Sprint(c.waiters), fmtRate(c.rate()), fmtDur(c.sectionMean),
			fmtRate(c.ideal()), fmt.Sprintf("%.1f%%", 100*c.rate()/c.ideal()), fmt.Sprint(c.failed)}
		if hasRedis {
			if r := c.redis; r != nil && c.acquired > 0 {
				n := float64(c.acquired)
				checkCounters(r)
				row = append(row, fmtF(float64(r.client)/n, 2), fmtF(float64(r.total)/n, 1), fmtF(r.cpu*1e6/n, 1))
			} else {
				row = append(row, "-", "-", "-")
			}
		}
		row = append(row, fmtF(c.cpu.Seconds()*1e6/float64(max(c.acquired, 1)), 1))
		t1.add(row...)
		lo, hi, mean := spread(c.perG)
		t2.add(c.name, fmt.Sprint(c.waiters),
			fmtDur(percentile(c.waits, 0.5)), fmtDur(percentile(c.waits, 0.99)),
			fmtDur(time.Duration(float64(c.waiters)*1.5*float64(section))),
			fmt.Sprintf("%d..%d (mean %.1f)", lo, hi, mean),
			fmt.Sprintf("%s / %s", fmtPct(100*(float64(lo)-mean)/mean), fmtPct(100*(float64(hi)-mean)/mean)),
			fmtDur(percentile(c.grants, 0.5)), fmtDur(percentile(c.grants, 0.99)),
			fmtDur(percentile(c.releases, 0.5)))
		if len(c.pings) > 0 {
			pings = append(pings, fmt.Sprintf("%s, %d goroutines: PING round trip p50 %s, p99 %s (%d pings)",
				c.name, c.waiters, fmtDur(percentile(c.pings, 0.5)), fmtDur(percentile(c.pings, 0.99)), len(c.pings)))
		}
		if c.firstErr != nil {
			t1.note("%s, %d goroutines: first error: %v", c.name, c.waiters, c.firstErr)
		}
	}
	t1.note("sections/s: acquisitions returned in the window per second; each is followed by one 1ms section.")
	if busySection {
		t1.note("mean section: measured length of the busy-waited critical section; ideal/s = 1 / mean section.")
	} else {
		t1.note("mean section: measured length of the critical section (time.Sleep(1ms) overshoots); ideal/s = 1 / mean section.")
	}
	t1.note("failed acquires: blocking acquires that returned an error in the window.")
	t1.note("bench CPU: CPU time of this benchmark process (all its goroutines) per acquisition.")
	if hasRedis {
		t1.note("cmds/acq: commands the clients sent per acquisition, counted client-side; includes the release and failed polls.")
		t1.note("server calls/acq: INFO stats total_commands_processed growth per acquisition: client commands plus every")
		t1.note("redis.call inside scripts (Redis 7.0 counts both; the INFO commandstats calls sum agrees).")
	}
	t2.note("wait: Acquire call to return. release-to-grant: previous holder calling Release to the next Acquire returning.")
	t2.note("Release call: Release call to return.")
	t2.note("min/max vs mean: the fewest and most sections one goroutine got, relative to the mean over goroutines.")
	if len(pings) > 0 {
		t2.note("")
		t2.note("The floor: a PING every 5ms on an otherwise idle connection during each window (not counted above):")
		for _, p := range pings {
			t2.note("  %s", p)
		}
	}
	t1.print(w)
	t2.print(w)
}

// sectionKind names the critical section in titles.
func sectionKind() string {
	if busySection {
		return "busy-wait 1ms"
	}
	return "time.Sleep(1ms)"
}

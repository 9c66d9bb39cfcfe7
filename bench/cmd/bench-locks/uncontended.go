package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
)

// redisRow builds one row's implementation.
type redisRow struct {
	name    string
	library bool // a lock library (a "peer"), not a hand-written baseline
	tuned   bool // a peer library with a non-default option
	baton   bool
	make    func() (*impl, error)
}

func redisRows(addr string) []redisRow {
	return []redisRow{
		{name: "baton (no heartbeat)", baton: true, make: func() (*impl, error) {
			return newBatonRedis("baton (no heartbeat)", addr, batonNoHB)
		}},
		{name: "baton (heartbeat on)", baton: true, make: func() (*impl, error) {
			return newBatonRedis("baton (heartbeat on)", addr, nil)
		}},
		{name: "redislock", library: true, make: func() (*impl, error) { return newRedislock(addr), nil }},
		{name: "redsync", library: true, make: func() (*impl, error) { return newRedsync(addr), nil }},
		{name: "rueidislock (defaults)", library: true, make: func() (*impl, error) {
			return newRueidislock("rueidislock (defaults)", addr, 0)
		}},
		{name: "rueidislock (KeyMajority 1)", library: true, tuned: true, make: func() (*impl, error) {
			return newRueidislock("rueidislock (KeyMajority 1)", addr, 1)
		}},
		{name: "plain go-redis", make: func() (*impl, error) { return newPlainGoRedis(addr), nil }},
		{name: "plain rueidis", make: func() (*impl, error) { return newPlainRueidis(addr) }},
	}
}

// runUncontended is part 1.
func runUncontended(ctx context.Context, p plan, addr string, stats *statsReader) error {
	fmt.Fprintf(os.Stderr, "part 1: uncontended pairs (%d rounds of %v per cell, each after %v warm-up)\n", p.pairRounds, p.pairCell, p.warm)
	var rows []redisRow
	var grid []gridRow
	for ri, row := range redisRows(addr) {
		if !selected(row.name) {
			continue
		}
		im, err := row.make()
		if err != nil {
			return fmt.Errorf("%s: %w", row.name, err)
		}
		defer im.close()
		rows = append(rows, row)
		grid = append(grid, gridRow{
			name: row.name,
			mk:   func(n int) pairMaker { return tryPair(im.try, fmt.Sprintf("bench:uc:%d:%d", ri, n)) },
			sent: &im.sent,
		})
	}
	res, err := runGrid(ctx, p, grid, stats)
	if err != nil {
		return err
	}

	t := &table{
		title: fmt.Sprintf("1. Uncontended TryAcquire+Release pairs/s, every goroutine on its own key (median of %d rounds of %v, rows interleaved)",
			p.pairRounds, p.pairCell),
		header: []string{"implementation", "1 g", "16 g", "64 g",
			"cmds/pair", "server calls/pair", "Redis CPU µs/pair", "Redis CPU", "bench CPU µs/pair", "bench CPU", "errors"},
	}
	rate := func(name string, n int) float64 {
		if c := res[name][n]; c != nil {
			return c.median()
		}
		return 0
	}
	var breakdown []string
	for _, row := range rows {
		cells := []string{row.name}
		var errs int64
		for _, n := range pairGoroutines {
			c := res[row.name][n]
			cells = append(cells, fmtRate(c.median()))
			errs += c.sum.errs
			if c.sum.firstErr != nil {
				t.note("%s, %d goroutines: first error: %v", row.name, n, c.sum.firstErr)
			}
			if verbose {
				breakdown = append(breakdown, fmt.Sprintf("%s, %d g: rounds %s; %s",
					row.name, n, fmtRates(c.rates), c.sum.redis.describe(c.sum.pairs)))
			}
		}
		at64 := res[row.name][64].sum
		r, pairs, secs := at64.redis, float64(at64.pairs), at64.window.Seconds()
		checkCounters(r)
		cells = append(cells,
			fmtF(float64(r.client)/pairs, 2),
			fmtF(float64(r.total)/pairs, 1),
			fmtF(r.cpu*1e6/pairs, 1),
			fmt.Sprintf("%.0f%%", 100*r.cpu/secs),
			fmtF(at64.cpu.Seconds()*1e6/pairs, 1),
			fmt.Sprintf("%.0f%%", 100*at64.cpu.Seconds()/secs),
			fmt.Sprint(errs))
		t.add(cells...)
	}

	t.note("cmds/pair:         commands the clients sent per pair, counted client-side (an EVALSHA is one")
	t.note("                   command however much its script does). At 64 goroutines.")
	t.note("server calls/pair: INFO stats total_commands_processed growth per pair: on Redis 7.0 this counts")
	t.note("                   client commands PLUS every redis.call inside scripts; the sum of INFO")
	t.note("                   commandstats calls agrees with it. At 64 goroutines.")
	t.note("Redis CPU:         server used_cpu_user+used_cpu_sys in the 64-goroutine windows (100%% = one core).")
	t.note("bench CPU:         CPU time of this benchmark process (the clients) in the same windows.")
	t.note("errors:            failed pairs, all cells (a try that found its own key busy counts too).")
	t.note("Every client uses its library's default options; leases are 10s (rueidislock defaults: 5s).")

	// Goals: baton (no heartbeat) against the best lock library.
	// best returns the fastest row at n goroutines among the peer
	// libraries (libOnly), optionally only at their defaults, or among
	// every row but Baton's.
	best := func(n int, libOnly, defaultsOnly bool) (string, float64) {
		var name string
		var v float64
		for _, row := range rows {
			if row.baton || (libOnly && !row.library) || (defaultsOnly && row.tuned) {
				continue
			}
			if r := rate(row.name, n); r > v {
				name, v = row.name, r
			}
		}
		return name, v
	}
	const baton = "baton (no heartbeat)"
	t.note("")
	for _, g := range []struct {
		n    int
		goal float64
	}{{1, 0.9}, {64, 2}} {
		name, v := best(g.n, true, false)
		ratio := rate(baton, g.n) / v
		t.note("goal: baton (no heartbeat) at %2d goroutines >= %.1fx best peer library: %.0f / %.0f (%s) = %.2fx  -> %s",
			g.n, g.goal, rate(baton, g.n), v, name, ratio, verdict(ratio >= g.goal))
		t.note("      rounds: baton %s; %s %s", fmtRange(res[baton][g.n].rates), name, fmtRange(res[name][g.n].rates))
		if dname, dv := best(g.n, true, true); dname != name {
			t.note("      against the best peer library at its defaults: %.0f / %.0f (%s) = %.2fx",
				rate(baton, g.n), dv, dname, rate(baton, g.n)/dv)
		}
	}
	for _, n := range pairGoroutines {
		name, v := best(n, false, false)
		t.note("info: baton (no heartbeat) at %2d goroutines vs best of all others: %.0f / %.0f (%s) = %.2fx",
			n, rate(baton, n), v, name, rate(baton, n)/v)
	}
	t.note("")
	for _, n := range pairGoroutines {
		ru, gr := rate("plain rueidis", n), rate("plain go-redis", n)
		t.note("client: plain rueidis / plain go-redis at %2d goroutines: %.0f / %.0f = %.2fx", n, ru, gr, ru/gr)
	}
	t.print(os.Stdout)
	printBreakdown("1. per cell (-v): the rounds' rates; server command calls per pair x µs per call", breakdown)
	return nil
}

// fmtRange prints the lowest and highest of rates.
func fmtRange(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	return fmtRate(slices.Min(rs)) + ".." + fmtRate(slices.Max(rs))
}

func fmtRates(rs []float64) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, fmtRate(r))
	}
	return strings.Join(parts, " ")
}

// verbose is set by -v: print per-command server breakdowns.
var verbose bool

// printBreakdown prints the per-cell details gathered under -v.
func printBreakdown(title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Println(title)
	for _, l := range lines {
		fmt.Println("  " + l)
	}
	fmt.Println()
}

// checkCounters warns on stderr when the two server-side counts of calls
// disagree by more than 1%, which would make the table's column ambiguous.
func checkCounters(r *redisSnap) {
	if d := r.total - r.calls; d*100 > r.total || -d*100 > r.total {
		fmt.Fprintf(os.Stderr, "warning: total_commands_processed %d and commandstats calls %d disagree\n", r.total, r.calls)
	}
}

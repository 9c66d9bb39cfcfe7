package main

import (
	"context"
	"fmt"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
	"os"
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
func runUncontended(ctx context.Context, p plan, addr string, stats *redisstat.Reader) error {
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

	t := &table.Table{
		Title: fmt.Sprintf("1. Uncontended TryAcquire+Release pairs/s, every goroutine on its own key (median of %d rounds of %v, rows interleaved)",
			p.pairRounds, p.pairCell),
		Header: []string{"implementation", "1 g", "16 g", "64 g",
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
			cells = append(cells, table.Rate(c.median()))
			errs += c.sum.errs
			if c.sum.firstErr != nil {
				t.Note("%s, %d goroutines: first error: %v", row.name, n, c.sum.firstErr)
			}
			if verbose {
				breakdown = append(breakdown, fmt.Sprintf("%s, %d g: rounds %s; %s",
					row.name, n, fmtRates(c.rates), c.sum.redis.Describe(c.sum.pairs)))
			}
		}
		at64 := res[row.name][64].sum
		r, pairs, secs := at64.redis, float64(at64.pairs), at64.window.Seconds()
		redisstat.CheckCounters(r)
		cells = append(cells,
			table.Float(float64(r.Client)/pairs, 2),
			table.Float(float64(r.Total)/pairs, 1),
			table.Float(r.CPU*1e6/pairs, 1),
			fmt.Sprintf("%.0f%%", 100*r.CPU/secs),
			table.Float(at64.cpu.Seconds()*1e6/pairs, 1),
			fmt.Sprintf("%.0f%%", 100*at64.cpu.Seconds()/secs),
			fmt.Sprint(errs))
		t.Add(cells...)
	}

	t.Note("cmds/pair:         commands the clients sent per pair, counted client-side (an EVALSHA is one")
	t.Note("                   command however much its script does). At 64 goroutines.")
	t.Note("server calls/pair: INFO stats total_commands_processed growth per pair: on Redis 7.0 this counts")
	t.Note("                   client commands PLUS every redis.call inside scripts; the sum of INFO")
	t.Note("                   commandstats calls agrees with it. At 64 goroutines.")
	t.Note("Redis CPU:         server used_cpu_user+used_cpu_sys in the 64-goroutine windows (100%% = one core).")
	t.Note("bench CPU:         CPU time of this benchmark process (the clients) in the same windows.")
	t.Note("errors:            failed pairs, all cells (a try that found its own key busy counts too).")
	t.Note("Every client uses its library's default options; leases are 10s (rueidislock defaults: 5s).")

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
	t.Note("")
	for _, g := range []struct {
		n    int
		goal float64
	}{{1, 0.9}, {64, 2}} {
		name, v := best(g.n, true, false)
		if name == "" || res[baton][g.n] == nil {
			t.Note("goal: baton (no heartbeat) at %2d goroutines: not judged, its row or every peer library's left out (-only)", g.n)
			continue
		}
		ratio := rate(baton, g.n) / v
		t.Note("goal: baton (no heartbeat) at %2d goroutines >= %.1fx best peer library: %.0f / %.0f (%s) = %.2fx  -> %s",
			g.n, g.goal, rate(baton, g.n), v, name, ratio, table.Verdict(ratio >= g.goal))
		t.Note("      rounds: baton %s; %s %s", table.Range(res[baton][g.n].rates), name, table.Range(res[name][g.n].rates))
		if dname, dv := best(g.n, true, true); dname != name {
			t.Note("      against the best peer library at its defaults: %.0f / %.0f (%s) = %.2fx",
				rate(baton, g.n), dv, dname, rate(baton, g.n)/dv)
		}
	}
	for _, n := range pairGoroutines {
		name, v := best(n, false, false)
		if name == "" {
			continue // -only left every other row out
		}
		t.Note("info: baton (no heartbeat) at %2d goroutines vs best of all others: %.0f / %.0f (%s) = %.2fx",
			n, rate(baton, n), v, name, rate(baton, n)/v)
	}
	t.Note("")
	for _, n := range pairGoroutines {
		ru, gr := rate("plain rueidis", n), rate("plain go-redis", n)
		if ru == 0 || gr == 0 {
			continue // -only left a plain client's row out
		}
		t.Note("client: plain rueidis / plain go-redis at %2d goroutines: %.0f / %.0f = %.2fx", n, ru, gr, ru/gr)
	}
	t.Print(os.Stdout)
	table.PrintBreakdown(os.Stdout, "1. per cell (-v): the rounds' rates; server command calls per pair x µs per call", breakdown)
	return nil
}

func fmtRates(rs []float64) string {
	var parts []string
	for _, r := range rs {
		parts = append(parts, table.Rate(r))
	}
	return strings.Join(parts, " ")
}

// verbose is set by -v: print per-command server breakdowns.
var verbose bool

package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
)

// pairGoroutines are the columns of the pairs tables.
var pairGoroutines = []int{1, 16, 64}

// gridRow is one row of a pairs table.
type gridRow struct {
	name string
	mk   func(n int) pairMaker // goroutine i's pair with n goroutines
	sent *atomic.Int64         // the row's client command counter; nil in memory
}

// gridCell is one cell of a pairs table: every round's rate, and the
// rounds' counters added up.
type gridCell struct {
	rates []float64
	sum   pairCell
}

// median is the cell's figure: the median of its rounds' rates.
func (c *gridCell) median() float64 { return loadgen.Median(c.rates) }

// runGrid measures every row at every goroutine count. The rows take turns:
// each round runs every row once for p.pairCell, so a slow spell of the
// machine (a 2-core VM shares its cores with Redis and with neighbours)
// hits all rows alike, and the median of the rounds discards it.
func runGrid(ctx context.Context, p plan, rows []gridRow, stats *redisstat.Reader) (map[string]map[int]*gridCell, error) {
	out := map[string]map[int]*gridCell{}
	for _, r := range rows {
		out[r.name] = map[int]*gridCell{}
		for _, n := range pairGoroutines {
			out[r.name][n] = &gridCell{}
		}
	}
	for _, n := range pairGoroutines {
		for round := range p.pairRounds {
			fmt.Fprintf(os.Stderr, "  %2d goroutines, round %d/%d\n", n, round+1, p.pairRounds)
			for _, r := range rows {
				c, err := runPairs(ctx, p, n, r.mk(n), stats, r.sent)
				if err != nil {
					return nil, fmt.Errorf("%s, %d goroutines: %w", r.name, n, err)
				}
				g := out[r.name][n]
				g.rates = append(g.rates, c.rate())
				g.sum.add(c)
			}
		}
	}
	return out, nil
}

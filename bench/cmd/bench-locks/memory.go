package main

import (
	"context"
	"fmt"
	"os"

	"github.com/batonhq/baton/bench/internal/table"
	"golang.org/x/sync/semaphore"
)

// semPerGoroutine makes pairs on a semaphore of weight 1 per goroutine: the
// in-process equivalent of a key per goroutine.
func semPerGoroutine(int) func(context.Context) error {
	s := semaphore.NewWeighted(1)
	return func(context.Context) error {
		if !s.TryAcquire(1) {
			return errBusy
		}
		s.Release(1)
		return nil
	}
}

// semShared makes pairs on one semaphore shared by n goroutines, of weight n
// so that a TryAcquire never fails: it measures the shared semaphore's
// internal mutex: what one mutex shared by every key would cost (batonmem
// spreads keys over 64).
func semShared(n int) pairMaker {
	s := semaphore.NewWeighted(int64(n))
	return func(int) func(context.Context) error {
		return func(context.Context) error {
			if !s.TryAcquire(1) {
				return errBusy
			}
			s.Release(1)
			return nil
		}
	}
}

// runMemory is part 3.
func runMemory(ctx context.Context, p plan) error {
	fmt.Fprintf(os.Stderr, "part 3: in-memory\n")
	im, err := newBatonMem("baton on batonmem", batonNoHB)
	if err != nil {
		return err
	}
	defer im.close()
	rows := []gridRow{
		{name: "baton on batonmem (no heartbeat)", mk: func(int) pairMaker { return tryPair(im.try, "bench:mem") }},
		{name: "x/sync/semaphore, one per goroutine", mk: func(int) pairMaker { return semPerGoroutine }},
		{name: "x/sync/semaphore, one shared (weight N)", mk: semShared},
	}
	res, err := runGrid(ctx, p, rows, nil)
	if err != nil {
		return err
	}
	t := &table.Table{
		Title:  fmt.Sprintf("3a. In-memory TryAcquire+Release pairs/s (median of %d rounds of %v, rows interleaved)", p.pairRounds, p.pairCell),
		Header: []string{"implementation", "1 g", "16 g", "64 g", "bench CPU µs/pair at 64 g", "errors"},
	}
	for _, r := range rows {
		cells := []string{r.name}
		var errs int64
		for _, n := range pairGoroutines {
			c := res[r.name][n]
			cells = append(cells, table.Rate(c.median()))
			errs += c.sum.errs
			if c.sum.firstErr != nil {
				t.Note("%s, %d goroutines: first error: %v", r.name, n, c.sum.firstErr)
			}
		}
		at64 := res[r.name][64].sum
		cells = append(cells, table.Float(at64.cpu.Seconds()*1e6/float64(at64.pairs), 3), fmt.Sprint(errs))
		t.Add(cells...)
	}
	t.Note("batonmem spreads lock keys over 64 mutexes by hash, so goroutines on separate keys rarely contend;")
	t.Note("the shared semaphore (weight N, so a TryAcquire never fails) shows the cost of one shared mutex alone.")
	t.Print(os.Stdout)

	fmt.Fprintf(os.Stderr, "  %-40s %3d goroutines\n", "baton on batonmem handoff", 64)
	hm, err := newBatonMem("baton on batonmem", nil)
	if err != nil {
		return err
	}
	c, err := runHandoff(ctx, p, hm, 64, "bench:mem:handoff", nil)
	hm.close()
	if err != nil {
		return err
	}
	printHandoff(os.Stdout, "3b. Contended handoff on batonmem", p, []handoffCell{c})
	return nil
}

// Command bench-locks measures Baton's locks against other Go Redis lock
// libraries and plain baselines, all on one private redis-server that it
// starts and stops itself, and prints plain-text tables to stdout.
//
//	cd bench && go run ./cmd/bench-locks          # full run, about 3 minutes
//	cd bench && go run ./cmd/bench-locks -quick   # smoke run, under a minute
//
// Three parts (see docs/benchmarks.md for what each figure means):
//
//  1. uncontended TryAcquire+Release pairs per second, every goroutine on a
//     key of its own;
//  2. contended handoff: many goroutines, one key of limit 1, a 1ms critical
//     section, blocking acquire;
//  3. the in-memory backend beside golang.org/x/sync/semaphore.
//
// Every load loop stops at its time limit or its iteration limit, whichever
// comes first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/batonhq/baton/bench/internal/machine"
	"github.com/batonhq/baton/bench/internal/runflags"
	"github.com/batonhq/baton/bench/internal/testbed"
)

// plan holds the durations of one run.
type plan struct {
	pairRounds int           // rounds of every pairs cell (the median is reported)
	warm       time.Duration // load before each measured pairs window, not counted
	pairCell   time.Duration // measured window of one round of a pairs cell
	handWarm   time.Duration // load before a contended window, not counted
	handoff    time.Duration // measured window of one contended cell
	stopGrace  time.Duration // how long stopping a cell may take before it is an error
}

var (
	fullPlan = plan{pairRounds: 5, warm: 200 * time.Millisecond, pairCell: 600 * time.Millisecond,
		handWarm: time.Second, handoff: 5 * time.Second, stopGrace: 30 * time.Second}
	quickPlan = plan{pairRounds: 2, warm: 100 * time.Millisecond, pairCell: 150 * time.Millisecond,
		handWarm: 300 * time.Millisecond, handoff: 1500 * time.Millisecond, stopGrace: 15 * time.Second}
)

// only, if set, selects the Redis rows and cells to run (-only).
var only *regexp.Regexp

// selected reports whether -only lets the implementation name run.
func selected(name string) bool { return runflags.Selected(only, name) }

func main() {
	quick := flag.Bool("quick", false, "short durations for a smoke run (under a minute)")
	parts := flag.String("parts", "uncontended,contended,memory", "comma-separated parts to run")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to `file`")
	flag.BoolVar(&verbose, "v", false, "also print each Redis cell's server commands per op and their cost")
	flag.BoolVar(&busySection, "busy", false, "contended runs: busy-wait the 1ms critical section instead of time.Sleep")
	onlyRe := flag.String("only", "", "run only the Redis rows and cells whose implementation name matches `regexp` (for diagnosis)")
	flag.Parse()
	only = runflags.Only("bench-locks", *onlyRe)

	if err := run(*quick, *parts, *cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "bench-locks:", err)
		os.Exit(1)
	}
}

func run(quick bool, parts, cpuprofile string) error {
	p := fullPlan
	if quick {
		p = quickPlan
	}
	want, err := runflags.Parts(parts, "uncontended", "contended", "memory")
	if err != nil {
		return err
	}

	ctx := context.Background()
	bed, err := testbed.Start(ctx, "bench-locks", cpuprofile)
	if err != nil {
		return err
	}
	defer bed.Close()
	machine.PrintMode(os.Stdout, quick, "short windows")

	if want["uncontended"] {
		if err := runUncontended(ctx, p, bed.Addr, bed.Stats); err != nil {
			return err
		}
	}
	if want["contended"] {
		if err := runContended(ctx, p, bed.Addr, bed.Stats); err != nil {
			return err
		}
	}
	if want["memory"] {
		if err := runMemory(ctx, p); err != nil {
			return err
		}
	}
	fmt.Printf("total time %.0fs\n", time.Since(bed.Started).Seconds())
	return nil
}

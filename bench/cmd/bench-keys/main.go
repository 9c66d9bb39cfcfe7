// Command bench-keys measures Baton's per-key concurrency control beside the
// ways asynq users limit a customer to one job at a time today, all on one
// private redis-server that it starts and stops itself, and prints
// plain-text tables to stdout.
//
//	cd bench && go run ./cmd/bench-keys          # full run, a few minutes
//	cd bench && go run ./cmd/bench-keys -quick   # smoke run, under a minute
//
// Parts (see docs/benchmarks.md, "Concurrency keys", for what each figure
// means):
//
//  1. onekey: 2,000 jobs of 1 ms on one key with limit 1 and 16 workers:
//     Baton (ConcurrencyOpts Limit 1, OnBusyWait) beside asynq with a
//     bsm/redislock lock that polls every 10 ms inside the handler, and
//     asynq whose handler returns an error when the lock is taken (retried
//     100 ms later; and with asynq's defaults, cut off at -default-cap).
//     Each job's 1 ms is a spin on the clock; one more Baton row runs
//     time.Sleep(1ms) sections instead, as earlier published runs did;
//  2. parked: Redis commands per completed job with 100, 10,000 and
//     100,000 jobs parked on one key of limit 1;
//  3. promotion: from a holder's handler return to the start of the next
//     parked job of its key, and where that time goes;
//  4. throughput: 50,000 no-op jobs on 1,000 keys of limit 10 beside the
//     same jobs with no key, 64 workers.
//
// Baton's cells run in database 0, each on a key prefix of its own; asynq's
// in database 1, each on a queue (and lock key) of its own. Every cell's
// keys are deleted after it, outside every measured window. Every load loop
// stops at its time limit or its count limit, whichever comes first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"

	"github.com/batonhq/baton/bench/internal/goals"
	"github.com/batonhq/baton/bench/internal/machine"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/runflags"
	"github.com/batonhq/baton/bench/internal/testbed"
)

// plan holds the sizes and durations of one run.
type plan struct {
	oneJobs    int           // jobs of part 1
	oneWork    time.Duration // each job's critical section in part 1
	oneWorkers int           // worker pool of part 1
	oneLimit   time.Duration // longest a part 1 row may take (but the capped one)
	oneRounds  int           // rounds of part 1's rows (but the capped one, run once)
	parked     []int         // jobs inserted on the key in part 2
	parkWarm   int           // completions of part 2 before its window
	parkWindow int           // completions in part 2's window (at most)
	parkLimit  time.Duration // longest part 2's window may take
	promoJobs  int           // jobs of part 3
	tpJobs     int           // backlog of part 4
	tpKeys     int           // keys of part 4's keyed row
	tpLimit    int           // their limit
	tpWorkers  int           // worker pool of part 4
	tpRounds   int           // rounds of part 4 (the median is reported)
	tpCap      time.Duration // longest a part 4 cell may take
	stopGrace  time.Duration // how long stopping a cell may take before it is an error
}

var (
	fullPlan = plan{oneJobs: 2000, oneWork: time.Millisecond, oneWorkers: 16, oneLimit: 2 * time.Minute, oneRounds: 3,
		parked: []int{100, 10000, 100000}, parkWarm: 200, parkWindow: 2000, parkLimit: time.Minute,
		promoJobs: 3000,
		tpJobs:    50000, tpKeys: 1000, tpLimit: 10, tpWorkers: 64, tpRounds: 3, tpCap: 2 * time.Minute,
		stopGrace: 30 * time.Second}
	quickPlan = plan{oneJobs: 300, oneWork: time.Millisecond, oneWorkers: 16, oneLimit: 30 * time.Second, oneRounds: 1,
		parked: []int{100, 1000, 10000}, parkWarm: 50, parkWindow: 500, parkLimit: 20 * time.Second,
		promoJobs: 500,
		tpJobs:    5000, tpKeys: 100, tpLimit: 10, tpWorkers: 64, tpRounds: 1, tpCap: 30 * time.Second,
		stopGrace: 15 * time.Second}
)

// verbose is set by -v: print per-command server breakdowns.
var verbose bool

// only, if set, selects the rows to run (-only).
var only *regexp.Regexp

// selected reports whether -only lets the row name run.
func selected(name string) bool { return runflags.Selected(only, name) }

func main() {
	quick := flag.Bool("quick", false, "small sizes for a smoke run (under a minute)")
	parts := flag.String("parts", "onekey,parked,promotion,throughput", "comma-separated parts to run")
	defaultCap := flag.Duration("default-cap", 30*time.Second,
		"how long part 1's row of asynq retry-on-busy with asynq's default retry delay may run; 0 skips the row")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to `file`")
	flag.BoolVar(&verbose, "v", false, "also print each cell's server commands per job and their cost")
	onlyRe := flag.String("only", "", "run only the rows whose name matches `regexp` (for diagnosis)")
	flag.Parse()
	only = runflags.Only("bench-keys", *onlyRe)
	if err := run(*quick, *parts, *defaultCap, *cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "bench-keys:", err)
		os.Exit(1)
	}
}

func run(quick bool, parts string, defaultCap time.Duration, cpuprofile string) error {
	p := fullPlan
	if quick {
		p = quickPlan
	}
	ctx := context.Background()
	bed, err := testbed.Start(ctx, "bench-keys", cpuprofile)
	if err != nil {
		return err
	}
	defer bed.Close()
	fmt.Printf("  peers:        github.com/hibiken/asynq %s, github.com/bsm/redislock %s\n",
		machine.ModuleVersion("github.com/hibiken/asynq"), machine.ModuleVersion("github.com/bsm/redislock"))
	machine.PrintMode(os.Stdout, quick, "small sizes")

	e := &env{p: p, addr: bed.Addr, stats: bed.Stats, goals: &goals.List{}, defaultCap: defaultCap}
	err = runflags.RunParts(ctx, parts, e, []runflags.Part[*env]{
		{Name: "onekey", Run: runOneKey},
		{Name: "parked", Run: runParked},
		{Name: "promotion", Run: runPromotion},
		{Name: "throughput", Run: runThroughput},
	})
	if err != nil {
		return err
	}
	e.goals.Print(os.Stdout)
	fmt.Printf("total time %.0fs\n", time.Since(bed.Started).Seconds())
	return nil
}

// env is what every part needs.
type env struct {
	p          plan
	addr       string
	stats      *redisstat.Reader
	goals      *goals.List
	defaultCap time.Duration
}

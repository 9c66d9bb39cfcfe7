// Command bench-jobs measures Baton's job system beside
// github.com/hibiken/asynq, both on one private redis-server that it starts
// and stops itself, and prints plain-text tables to stdout.
//
//	cd bench && go run ./cmd/bench-jobs          # full run, a few minutes
//	cd bench && go run ./cmd/bench-jobs -quick   # smoke run, under a minute
//
// Parts (see docs/benchmarks.md, "Jobs", for what each figure means):
//
//  1. insert: jobs inserted per second, one at a time from 1 and from 16
//     goroutines, and batched (Baton's InsertMany; asynq has no batch);
//  2. e2e: a backlog of no-op jobs worked off by a pool of 16 and of 64
//     workers, start to last outcome recorded;
//  3. latency: insert-to-start latency of single jobs with idle workers;
//  4. scripts: the server time of Baton's insert, fetch and finish scripts
//     per job, each run alone, and the floors under one goroutine's calls
//     (diagnosis).
//
// Baton's cells run in database 0, each on a key prefix of its own; asynq's
// in database 1, each on a queue of its own. Every cell's keys are deleted
// after it, outside every measured window. Every load loop stops at its
// time limit or its count limit, whichever comes first.
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
	insRounds  int           // rounds of every insert cell (the median is reported)
	insWarm    time.Duration // load before each measured insert window, not counted
	insWindow  time.Duration // measured window of one round of an insert cell
	e2eJobs    int           // backlog of one end-to-end cell
	e2eRounds  int           // rounds of every end-to-end cell (the median is reported)
	e2eLimit   time.Duration // longest an end-to-end cell may take
	latInserts int           // inserts of one latency cell
	latIdle    time.Duration // how long the workers idle before the first insert
	scriptJobs int           // jobs per step of the scripts part
	floorCalls int           // calls per round of each row of the scripts part's table 4c
	stopGrace  time.Duration // how long stopping a cell may take before it is an error
}

var (
	fullPlan = plan{insRounds: 5, insWarm: 200 * time.Millisecond, insWindow: time.Second,
		e2eJobs: 50000, e2eRounds: 3, e2eLimit: 2 * time.Minute,
		latInserts: 2000, latIdle: 2 * time.Second, scriptJobs: 20000, floorCalls: 1000, stopGrace: 30 * time.Second}
	quickPlan = plan{insRounds: 1, insWarm: 100 * time.Millisecond, insWindow: 300 * time.Millisecond,
		e2eJobs: 5000, e2eRounds: 1, e2eLimit: 30 * time.Second,
		latInserts: 200, latIdle: 2 * time.Second, scriptJobs: 2000, floorCalls: 200, stopGrace: 15 * time.Second}
)

// verbose is set by -v: print per-command server breakdowns.
var verbose bool

// only, if set, selects the rows of parts 1-3 to run (-only).
var only *regexp.Regexp

// flushDelay is the MaxFlushDelay of the rueidis client under every Baton
// Client (parts 1-4, not the floors of 4b and 4c), set by -flush-delay;
// 0 is rueidis's default, which flushes at once.
var flushDelay time.Duration

// noAutoPipelining sets rueidis's DisableAutoPipelining under every Baton
// Client (parts 1-4, not 4b and 4c), set by -disable-autopipelining: each
// call on a pooled connection that its caller writes and reads, as
// go-redis does, instead of through rueidis's background writer and reader.
var noAutoPipelining bool

// selected reports whether -only lets the row name run.
func selected(name string) bool { return runflags.Selected(only, name) }

func main() {
	quick := flag.Bool("quick", false, "small sizes for a smoke run (under a minute)")
	parts := flag.String("parts", "insert,e2e,latency,scripts", "comma-separated parts to run")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of this process to `file`")
	flag.BoolVar(&verbose, "v", false, "also print each cell's server commands per job and their cost")
	onlyRe := flag.String("only", "", "run only the rows of parts 1-3 whose name matches `regexp` (for diagnosis)")
	flag.DurationVar(&flushDelay, "flush-delay", 0, "rueidis `MaxFlushDelay` under every Baton Client (parts 1-4, not 4b and 4c; 0: rueidis's default)")
	flag.BoolVar(&noAutoPipelining, "disable-autopipelining", false, "rueidis `DisableAutoPipelining` under every Baton Client (parts 1-4, not 4b and 4c)")
	flag.Parse()
	if flushDelay < 0 {
		fmt.Fprintln(os.Stderr, "bench-jobs: -flush-delay must not be negative")
		os.Exit(2)
	}
	only = runflags.Only("bench-jobs", *onlyRe)
	if err := run(*quick, *parts, *cpuprofile); err != nil {
		fmt.Fprintln(os.Stderr, "bench-jobs:", err)
		os.Exit(1)
	}
}

func run(quick bool, parts, cpuprofile string) error {
	p := fullPlan
	if quick {
		p = quickPlan
	}
	ctx := context.Background()
	bed, err := testbed.Start(ctx, "bench-jobs", cpuprofile)
	if err != nil {
		return err
	}
	defer bed.Close()
	fmt.Printf("  peer:         github.com/hibiken/asynq %s\n", machine.ModuleVersion("github.com/hibiken/asynq"))
	machine.PrintMode(os.Stdout, quick, "small sizes")
	if flushDelay > 0 || noAutoPipelining {
		fmt.Printf("  Baton's rueidis clients (parts 1-4, not 4b and 4c): MaxFlushDelay %v (-flush-delay), DisableAutoPipelining %v (-disable-autopipelining)\n\n", flushDelay, noAutoPipelining)
	}

	e := &env{p: p, addr: bed.Addr, stats: bed.Stats, goals: &goals.List{}}
	err = runflags.RunParts(ctx, parts, e, []runflags.Part[*env]{
		{Name: "insert", Run: runInsert},
		{Name: "e2e", Run: runE2E},
		{Name: "latency", Run: runLatency},
		{Name: "scripts", Run: runScripts},
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
	p     plan
	addr  string
	stats *redisstat.Reader
	goals *goals.List
}

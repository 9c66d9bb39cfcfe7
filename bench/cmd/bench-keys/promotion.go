package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
)

// promoWorkers is the worker pool of part 3, idle but for the key's job.
const promoWorkers = 16

// promoWork is what each job of part 3 sleeps.
const promoWork = time.Millisecond

// promoEvents are the steps of a promotion, in the order they usually
// happen, as the driver wrapper sees them.
var promoEvents = []string{
	"completer calls JobFinish (frees the slot, promotes, pushes a wake token)",
	"JobFinish returns",
	"JobWait (BLPOP on the wake list) returns",
	"JobFetch that leases the promoted job is called",
	"that JobFetch returns",
	"the promoted job's handler starts",
}

// promoVariants are part 3's two runs: Baton's default, and the promotion
// path that DisableChaining gives (and a client working several queues
// whose other workers are all busy).
var promoVariants = []struct {
	name, title string
	chain       bool
}{
	{"chained", "chained jobs (the default)", true},
	{"unchained", "DisableChaining: promotion by the finish, then a wake-up and a fetch", false},
}

// runPromotion is part 3: jobs of one key of limit 1 run one after the
// other on an otherwise idle pool; each job's handler records when it
// returns, and the next one's start minus that is the promotion latency.
// It runs once with chained jobs and once without.
func runPromotion(ctx context.Context, e *env) error {
	if !selected("promotion") {
		return nil
	}
	var p99s []string
	worst := time.Duration(0)
	for i, v := range promoVariants {
		lat, err := promotionRun(ctx, e, fmt.Sprintf("3%c", 'a'+i), v.title, v.chain)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		p99 := loadgen.Percentile(lat, 0.99)
		worst = max(worst, p99)
		p99s = append(p99s, fmt.Sprintf("%s p50 %s, p99 %s", v.name,
			table.Dur(loadgen.Percentile(lat, 0.5)), table.Dur(p99)))
	}
	e.goals.Add(worst <= 5*time.Millisecond, "promotion latency p99 <= 5ms: %s", strings.Join(p99s, "; "))
	return nil
}

// promotionRun runs part 3 once, chaining jobs or not, prints its table
// (numbered num) and returns the promotion latencies.
func promotionRun(ctx context.Context, e *env, num, title string, chain bool) ([]time.Duration, error) {
	p := e.p
	n := p.promoJobs
	fmt.Fprintf(os.Stderr, "part 3: promotion latency, %s (%d jobs of %v on one key, %d workers)\n", title, n, promoWork, promoWorkers)
	var (
		b       *batonSide
		mu      sync.Mutex // the handlers run one at a time, but meet through Redis
		started int
		lastRet int64 // ns since the driver's base
		lat     []time.Duration
		steps   = make([][]time.Duration, len(promoEvents)-1)
		done    = loadgen.NewCountdown(n)
	)
	work := func(ctx context.Context, job *baton.Job[keyArgs]) error {
		td := b.td
		now := td.now()
		mu.Lock()
		started++
		if started > 1 {
			lat = append(lat, time.Duration(now-lastRet))
			for i, ev := range []int64{td.finishEnter.Load(), td.finishExit.Load(), td.waitExit.Load(),
				td.hitEnter.Load(), td.hitExit.Load()} {
				if ev >= lastRet && ev <= now {
					steps[i] = append(steps[i], time.Duration(ev-lastRet))
				}
			}
		}
		mu.Unlock()
		time.Sleep(promoWork)
		mu.Lock()
		lastRet = td.now()
		mu.Unlock()
		done.Add(1)
		return nil
	}
	b, err := newBatonSideConfig(e.addr, "bkl", promoWorkers, work, func(c *baton.Config) { c.DisableChaining = !chain })
	if err != nil {
		return nil, err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	if err := b.insert(ctx, n, func(int) int { return 9 }, func(int) *baton.InsertOpts { return keyed(1) }); err != nil {
		return nil, err
	}
	if err := b.expect(ctx, map[baton.JobState]int{baton.JobStateAvailable: 1, baton.JobStateParked: n - 1}); err != nil {
		return nil, fmt.Errorf("after the insert: %w", err)
	}
	w := redisstat.Window{Stats: e.stats, Sent: &b.Sent}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	if err := b.client.Start(ctx); err != nil {
		return nil, err
	}
	ok := done.Wait(time.Duration(n)*promoWork*20 + 10*time.Second)
	err = w.End(ctx)
	err = errors.Join(err, b.stop(p.stopGrace))
	if !ok {
		return nil, errors.Join(err, fmt.Errorf("only %d of %d jobs done", done.Count(), n))
	}
	if err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()

	t := &table.Table{
		Title: fmt.Sprintf("%s. Promotion latency, %s: %d jobs of %v on one key of limit 1, %d workers otherwise idle",
			num, title, n, promoWork, promoWorkers),
		Header: []string{"from a holder's return to", "p50", "p90", "p99", "max", "seen"},
	}
	for i, ev := range promoEvents {
		ds := lat
		if i < len(steps) {
			ds = steps[i]
		}
		t.Add(ev, table.Dur(loadgen.Percentile(ds, 0.5)), table.Dur(loadgen.Percentile(ds, 0.9)),
			table.Dur(loadgen.Percentile(ds, 0.99)), table.Dur(loadgen.Percentile(ds, 1)),
			fmt.Sprintf("%.0f%%", 100*float64(len(ds))/float64(max(len(lat), 1))))
	}
	jobs := float64(n)
	t.Note("The last row is the promotion latency: the next job's handler start minus the previous job's handler")
	t.Note("  return, both in this process, over the %d promotions. The rows above it place each step of the way,", len(lat))
	t.Note("  timed by a wrapper around the driver: the last such event before the handler started and after the")
	t.Note("  return; seen: in how many promotions the event fell in that gap (a wake can come from a timer instead).")
	if chain {
		t.Note("  Chained: the next job is leased behind the holder before it returns and starts on the same worker,")
		t.Note("  with no driver call in the gap, so the rows above the last one see (almost) nothing.")
	}
	t.Note("Whole run: %.2f server calls, %.2f scripts, %.1f µs of Redis CPU per job.",
		float64(w.Delta.Total)/jobs, float64(scriptCalls(w.Delta))/jobs, w.Delta.CPU*1e6/jobs)
	t.Print(os.Stdout)
	if verbose {
		table.PrintBreakdown(os.Stdout, num+". (-v): server command calls per job x µs per call", []string{w.Delta.Describe(int64(n))})
	}
	return lat, nil
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
)

// keyArgs is the job of every Baton cell: its index, and the customer its
// concurrency key is made of.
type keyArgs struct {
	I        int `json:"i"`
	Customer int `json:"c"`
}

func (keyArgs) Kind() string { return "bench" }

// customerKey is the concurrency key of a job: its customer.
var customerKey = baton.KeyOf(func(a keyArgs) string { return "customer:" + strconv.Itoa(a.Customer) })

// keyed returns the insert options of a job on its customer's key with
// limit, parked while the key is busy (OnBusyWait, the default, spelled out).
func keyed(limit int) *baton.InsertOpts {
	return &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{Key: customerKey, Limit: limit, OnBusy: baton.OnBusyWait}}
}

// batonSide is the Baton end of one cell (package jobcell), its driver
// seen through tracedDriver, and a Client.
type batonSide struct {
	*jobcell.Baton
	td     *tracedDriver
	client *baton.Client
}

// newBatonSide makes a Baton cell on key prefix with Concurrency workers
// running work; everything else is Baton's default. Its logs are discarded.
func newBatonSide(addr, prefix string, workers int, work baton.WorkFunc[keyArgs]) (*batonSide, error) {
	return newBatonSideConfig(addr, prefix, workers, work, nil)
}

// newBatonSideConfig is newBatonSide with set, if not nil, changing the
// client's Config before the client is made.
func newBatonSideConfig(addr, prefix string, workers int, work baton.WorkFunc[keyArgs], set func(*baton.Config)) (*batonSide, error) {
	cell, err := jobcell.NewBaton(addr, prefix)
	if err != nil {
		return nil, err
	}
	b := &batonSide{Baton: cell, td: &tracedDriver{JobDriver: cell.Driver, base: time.Now()}}
	ws := baton.NewWorkers()
	baton.AddWorker[keyArgs](ws, work, nil)
	cfg := &baton.Config{Workers: ws, Concurrency: workers, Logger: slog.New(slog.DiscardHandler)}
	if set != nil {
		set(cfg)
	}
	b.client, err = baton.NewClient(b.td, cfg)
	if err != nil {
		cell.Close()
		return nil, err
	}
	return b, nil
}

// insert inserts n jobs with InsertMany, 1000 at a time; job i is of
// customer cust(i) with opts(i) (nil: no options).
func (b *batonSide) insert(ctx context.Context, n int, cust func(i int) int, opts func(i int) *baton.InsertOpts) error {
	return jobcell.InsertBatches(ctx, b.client, n, func(i int) *baton.InsertManyParams {
		return &baton.InsertManyParams{Args: keyArgs{I: i, Customer: cust(i)}, Opts: opts(i)}
	})
}

// expect checks the counts of the queue's jobs by state (states not named
// must have none).
func (b *batonSide) expect(ctx context.Context, want map[baton.JobState]int) error {
	st, err := b.client.QueueStats(ctx, "default")
	if err != nil {
		return err
	}
	for state, got := range st.Counts {
		if got != want[state] {
			return fmt.Errorf("%d jobs %s, want %d (all: %v)", got, state, want[state], st.Counts)
		}
	}
	for state, n := range want {
		if st.Counts[state] != n {
			return fmt.Errorf("%d jobs %s, want %d (all: %v)", st.Counts[state], state, n, st.Counts)
		}
	}
	return nil
}

// stop stops the client, waiting at most grace.
func (b *batonSide) stop(grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	return b.client.Stop(ctx)
}

// tracedDriver passes every call to the real driver; it counts the fetches,
// finishes and waits and the jobs they carried, and keeps the times (ns
// since base) of the last of each event, for part 3's breakdown.
type tracedDriver struct {
	batondriver.JobDriver
	base time.Time

	fetches, fetched, finishes, finished, waits atomic.Int64
	// recorded counts outcomes the backend accepted (not stale); onRecorded,
	// if set, counts them too.
	recorded   atomic.Int64
	onRecorded atomic.Pointer[loadgen.Countdown]

	// The last time each of these happened, in ns since base.
	finishEnter, finishExit, waitExit, hitEnter, hitExit atomic.Int64
}

func (d *tracedDriver) now() int64 { return int64(time.Since(d.base)) }

func (d *tracedDriver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	t0 := d.now()
	res, err := d.JobDriver.JobFetch(ctx, p)
	d.fetches.Add(1)
	if err == nil && len(res.Jobs) > 0 {
		// Exit first: the handler may start as soon as this returns, and
		// reads enter after exit.
		d.hitExit.Store(d.now())
		d.hitEnter.Store(t0)
		d.fetched.Add(int64(len(res.Jobs)))
	}
	return res, err
}

func (d *tracedDriver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	d.finishEnter.Store(d.now())
	res, err := d.JobDriver.JobFinish(ctx, p)
	d.finishExit.Store(d.now())
	d.finishes.Add(1)
	if err == nil {
		n := int64(len(p.Finished) - len(res.Stale))
		d.finished.Add(int64(len(p.Finished)))
		d.recorded.Add(n)
		if c := d.onRecorded.Load(); c != nil {
			c.Add(n)
		}
	}
	return res, err
}

func (d *tracedDriver) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	err := d.JobDriver.JobWait(ctx, p)
	d.waits.Add(1)
	if err == nil {
		d.waitExit.Store(d.now())
	}
	return err
}

// driverCounts is a copy of a tracedDriver's counters.
type driverCounts struct{ fetches, fetched, finishes, finished, waits int64 }

func (d *tracedDriver) counts() driverCounts {
	return driverCounts{fetches: d.fetches.Load(), fetched: d.fetched.Load(), finishes: d.finishes.Load(),
		finished: d.finished.Load(), waits: d.waits.Load()}
}

func (c driverCounts) sub(o driverCounts) driverCounts {
	return driverCounts{c.fetches - o.fetches, c.fetched - o.fetched, c.finishes - o.finishes,
		c.finished - o.finished, c.waits - o.waits}
}

func (c *driverCounts) add(o driverCounts) {
	c.fetches += o.fetches
	c.fetched += o.fetched
	c.finishes += o.finishes
	c.finished += o.finished
	c.waits += o.waits
}

package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
)

// benchArgs is the job of every Baton cell: a no-op that carries its
// index, so that the latency cells can find when it was inserted.
type benchArgs struct {
	I int `json:"i"`
}

func (benchArgs) Kind() string { return "bench" }

// batonSide is the Baton end of one cell (package jobcell), its driver
// seen through countedDriver, and a Client.
type batonSide struct {
	*jobcell.Baton
	cd     *countedDriver
	client *baton.Client
}

// newBatonSide makes a Baton cell on key prefix. cfg may be nil; work, if
// set, is registered as the worker of benchArgs. The client's logs are
// discarded.
func newBatonSide(addr, prefix string, cfg *baton.Config, work baton.WorkFunc[benchArgs]) (*batonSide, error) {
	cell, err := jobcell.NewBatonOptions(rueidis.ClientOption{InitAddress: []string{addr}, MaxFlushDelay: flushDelay, DisableAutoPipelining: noAutoPipelining}, prefix)
	if err != nil {
		return nil, err
	}
	b := &batonSide{Baton: cell, cd: &countedDriver{JobDriver: cell.Driver}}
	c := baton.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Logger = slog.New(slog.DiscardHandler)
	if work != nil {
		c.Workers = baton.NewWorkers()
		baton.AddWorker[benchArgs](c.Workers, work, nil)
	}
	b.client, err = baton.NewClient(b.cd, &c)
	if err != nil {
		cell.Close()
		return nil, err
	}
	return b, nil
}

// backlog inserts n available jobs with InsertMany, 1000 at a time.
func (b *batonSide) backlog(ctx context.Context, n int) error {
	err := jobcell.InsertBatches(ctx, b.client, n, func(i int) *baton.InsertManyParams {
		return &baton.InsertManyParams{Args: benchArgs{I: i}}
	})
	if err != nil {
		return err
	}
	st, err := b.client.QueueStats(ctx, "default")
	if err != nil {
		return err
	}
	if got := st.Counts[baton.JobStateAvailable]; got != n {
		return fmt.Errorf("backlog: %d jobs available, want %d", got, n)
	}
	return nil
}

// countedDriver passes every call to the real driver and counts, for the
// diagnosis, how many jobs each fetch and each finish carried and how long
// their round trips took.
type countedDriver struct {
	batondriver.JobDriver

	fetches, fetched, fetchAsked, fetchEmpty, fetchNanos atomic.Int64
	finishes, finished, finishNanos                      atomic.Int64
	waits                                                atomic.Int64
	// recorded counts outcomes the backend accepted (not stale); when it
	// reaches the target of onRecorded, that countdown fires.
	recorded   atomic.Int64
	onRecorded atomic.Pointer[loadgen.Countdown]
}

func (d *countedDriver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	t0 := time.Now()
	res, err := d.JobDriver.JobFetch(ctx, p)
	d.fetchNanos.Add(int64(time.Since(t0)))
	d.fetches.Add(1)
	d.fetchAsked.Add(int64(p.Max))
	if err == nil {
		d.fetched.Add(int64(len(res.Jobs)))
		if len(res.Jobs) == 0 {
			d.fetchEmpty.Add(1)
		}
	}
	return res, err
}

func (d *countedDriver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	t0 := time.Now()
	res, err := d.JobDriver.JobFinish(ctx, p)
	d.finishNanos.Add(int64(time.Since(t0)))
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

func (d *countedDriver) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	d.waits.Add(1)
	return d.JobDriver.JobWait(ctx, p)
}

// driverCounts is a copy of a countedDriver's counters.
type driverCounts struct {
	fetches, fetched, fetchAsked, fetchEmpty, finishes, finished, waits int64
	fetchTime, finishTime                                               time.Duration
}

func (d *countedDriver) counts() driverCounts {
	return driverCounts{
		fetches: d.fetches.Load(), fetched: d.fetched.Load(), fetchAsked: d.fetchAsked.Load(),
		fetchEmpty: d.fetchEmpty.Load(), finishes: d.finishes.Load(), finished: d.finished.Load(),
		waits: d.waits.Load(), fetchTime: time.Duration(d.fetchNanos.Load()), finishTime: time.Duration(d.finishNanos.Load()),
	}
}

func (c *driverCounts) add(o driverCounts) {
	c.fetches += o.fetches
	c.fetched += o.fetched
	c.fetchAsked += o.fetchAsked
	c.fetchEmpty += o.fetchEmpty
	c.finishes += o.finishes
	c.finished += o.finished
	c.waits += o.waits
	c.fetchTime += o.fetchTime
	c.finishTime += o.finishTime
}

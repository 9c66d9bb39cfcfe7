package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
)

// Iteration limits: every load loop also stops on these, so that none can
// run away even if its clock-based stop were broken.
const (
	maxPairIters    = 1 << 30 // per goroutine, uncontended (the in-memory rows do ~30M/s)
	maxHandoffIters = 1 << 20 // per goroutine, contended
)

// window measures Redis counters across a measured window; with a nil
// reader it measures nothing.
type window struct {
	stats      *redisstat.Reader
	sent       *atomic.Int64 // the measured clients' command counter
	before     redisstat.Snap
	sentBefore int64
	delta      *redisstat.Snap
	cpuBefore  time.Duration
	cpu        time.Duration // this process's CPU time in the window
}

func (w *window) start(ctx context.Context) error {
	w.cpuBefore = loadgen.ProcessCPU()
	if w.stats == nil {
		return nil
	}
	s, err := w.stats.Snap(ctx)
	w.before, w.sentBefore = s, w.sent.Load()
	return err
}

func (w *window) end(ctx context.Context) error {
	w.cpu = loadgen.ProcessCPU() - w.cpuBefore
	if w.stats == nil {
		return nil
	}
	sent := w.sent.Load()
	s, err := w.stats.Snap(ctx)
	if err != nil {
		return err
	}
	d := s.Sub(w.before)
	d.Client = sent - w.sentBefore
	w.delta = &d
	return nil
}

// pairCell is the result of one uncontended cell.
type pairCell struct {
	goroutines int
	pairs      int64 // completed pairs in the window
	window     time.Duration
	errs       int64 // failed pairs, whole run
	firstErr   error
	redis      *redisstat.Snap // counters' growth in the window; nil without Redis
	cpu        time.Duration   // this process's CPU time in the window
}

func (c pairCell) rate() float64 { return float64(c.pairs) / c.window.Seconds() }

// add adds o's counts to c's.
func (c *pairCell) add(o pairCell) {
	c.goroutines = o.goroutines
	c.pairs += o.pairs
	c.window += o.window
	c.errs += o.errs
	c.cpu += o.cpu
	if c.firstErr == nil {
		c.firstErr = o.firstErr
	}
	if o.redis != nil {
		if c.redis == nil {
			c.redis = &redisstat.Snap{}
		}
		c.redis.Add(*o.redis)
	}
}

// pairMaker returns goroutine i's pair: one acquire and one release.
type pairMaker func(i int) func(ctx context.Context) error

// tryPair makes pairs of try on key prefix:i, then unlock.
func tryPair(try lockFunc, prefix string) pairMaker {
	return func(i int) func(context.Context) error {
		key := fmt.Sprintf("%s:%d", prefix, i)
		return func(ctx context.Context) error {
			unlock, err := try(ctx, key)
			if err != nil {
				return err
			}
			return unlock(ctx)
		}
	}
}

// runPairs runs n goroutines, each repeating its pair, for p.warm unmeasured
// and then p.pairCell measured.
func runPairs(ctx context.Context, p plan, n int, mk pairMaker, stats *redisstat.Reader, sent *atomic.Int64) (pairCell, error) {
	ctx, cancel := context.WithTimeout(ctx, p.warm+p.pairCell+p.stopGrace)
	defer cancel()
	var (
		stop   atomic.Bool
		counts = make([]loadgen.Counter, n)
		errs   atomic.Int64
		first  loadgen.FirstError
		wg     sync.WaitGroup
	)
	for i := range n {
		pair := mk(i)
		wg.Go(func() {
			for it := 0; it < maxPairIters && !stop.Load() && ctx.Err() == nil; it++ {
				if err := pair(ctx); err != nil {
					errs.Add(1)
					first.Set(err)
					continue
				}
				counts[i].Add(1)
			}
		})
	}
	sum := func() (s int64) {
		for i := range counts {
			s += counts[i].Load()
		}
		return s
	}

	time.Sleep(p.warm)
	w := window{stats: stats, sent: sent}
	err := w.start(ctx)
	before, t0 := sum(), time.Now()
	time.Sleep(p.pairCell)
	after, t1 := sum(), time.Now()
	err = errors.Join(err, w.end(ctx))
	stop.Store(true)
	if !loadgen.WaitGroup(&wg, p.stopGrace) {
		cancel()
		err = errors.Join(err, fmt.Errorf("%d goroutines did not stop within %v", n, p.stopGrace))
	}
	return pairCell{
		goroutines: n, pairs: after - before, window: t1.Sub(t0),
		errs: errs.Load(), firstErr: first.Err, redis: w.delta, cpu: w.cpu,
	}, err
}

// section is the nominal critical section of the contended runs. By
// default it is a time.Sleep, not a busy-wait: with hundreds of goroutines
// on 2 cores a busy-wait takes CPU the lock itself needs. The actual length
// is measured and the ideal rate computed from it. -busy switches to a
// busy-wait of exactly section.
const section = time.Millisecond

// busySection is set by -busy.
var busySection bool

// hold spends the critical section.
func hold() {
	if !busySection {
		time.Sleep(section)
		return
	}
	for start := time.Now(); time.Since(start) < section; {
	}
}

// handoffCell is the result of one contended cell.
type handoffCell struct {
	name     string
	waiters  int
	window   time.Duration
	acquired int64   // acquisitions returned in the window
	perG     []int64 // the same, per goroutine
	// sectionMean is the measured mean length of the critical section.
	sectionMean time.Duration
	// waits are Acquire call-to-return times; grants are the times from the
	// previous holder calling Release to Acquire returning; releases are
	// Release call-to-return times. All for acquisitions in the window.
	waits, grants, releases []time.Duration
	// pings are round trips of PING on an idle connection of its own, one
	// every 5ms during the window: the floor any handoff through Redis pays.
	pings    []time.Duration
	failed   int64 // blocking acquires that gave up or failed in the window
	firstErr error
	redis    *redisstat.Snap
	cpu      time.Duration // this process's CPU time in the window
}

// rate is acquisitions (= critical sections) per second.
func (c handoffCell) rate() float64 { return float64(c.acquired) / c.window.Seconds() }

// ideal is the rate at which sections could follow each other with no gap.
func (c handoffCell) ideal() float64 { return 1 / c.sectionMean.Seconds() }

// runHandoff runs n goroutines on one key of limit 1. Each loops: blocking
// acquire, sleep for section, release. The shared timestamp lastRelease is
// set by a holder just before it calls Release; the next holder's Acquire
// returning reads it to time the handoff. Only one goroutine holds the lock
// at a time, so it always reads the release of its predecessor.
func runHandoff(ctx context.Context, p plan, im *impl, n int, key string, stats *redisstat.Reader) (handoffCell, error) {
	name, wait := im.name, im.wait
	runCtx, cancel := context.WithTimeout(ctx, p.handWarm+p.handoff+p.stopGrace)
	defer cancel()
	epoch := time.Now()
	since := func() int64 { return int64(time.Since(epoch)) } // monotonic

	type worker struct {
		acquired                int64
		secSum                  time.Duration
		waits, grants, releases []time.Duration
		failed                  int64
	}
	var (
		measuring   atomic.Bool
		lastRelease atomic.Int64
		workers     = make([]worker, n)
		first       loadgen.FirstError
		wg          sync.WaitGroup
	)
	for i := range n {
		w := &workers[i]
		wg.Go(func() {
			for it := 0; it < maxHandoffIters && runCtx.Err() == nil; it++ {
				t0 := since()
				unlock, err := wait(runCtx, key)
				t1 := since()
				if err != nil {
					if runCtx.Err() != nil {
						return // stopping
					}
					if measuring.Load() {
						w.failed++
					}
					first.Set(err)
					continue
				}
				in := measuring.Load()
				if in {
					w.acquired++
					w.waits = append(w.waits, time.Duration(t1-t0))
					if lr := lastRelease.Load(); lr > 0 {
						w.grants = append(w.grants, time.Duration(t1-lr))
					}
				}
				hold()
				t2 := since()
				if in {
					w.secSum += time.Duration(t2 - t1)
				}
				lastRelease.Store(t2)
				rctx, rcancel := context.WithTimeout(context.WithoutCancel(runCtx), 5*time.Second)
				if err := unlock(rctx); err != nil {
					first.Set(fmt.Errorf("release: %w", err))
				}
				rcancel()
				if in {
					w.releases = append(w.releases, time.Duration(since()-t2))
				}
			}
		})
	}

	time.Sleep(p.handWarm)
	win := window{stats: stats, sent: &im.sent}
	err := win.start(ctx)
	measuring.Store(true)
	t0 := time.Now()
	var pings []time.Duration
	pinged := make(chan struct{})
	go func() {
		defer close(pinged)
		for i := 0; stats != nil && i < maxHandoffIters && measuring.Load(); i++ {
			start := time.Now()
			if stats.Ping(ctx) == nil {
				pings = append(pings, time.Since(start))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(p.handoff)
	measuring.Store(false)
	t1 := time.Now()
	<-pinged
	err = errors.Join(err, win.end(ctx))
	if win.delta != nil { // the pings are not the lock's commands
		n := int64(len(pings))
		win.delta.Total -= n
		win.delta.Calls -= n
		st := win.delta.Cmds["ping"]
		win.delta.Cmds["ping"] = redisstat.CmdStat{Calls: st.Calls - n, Usec: st.Usec}
	}
	cancel() // waiting acquires return; the holder finishes and releases
	c := handoffCell{name: name, waiters: n, window: t1.Sub(t0), redis: win.delta, cpu: win.cpu, pings: pings}
	if !loadgen.WaitGroup(&wg, p.stopGrace) {
		// The workers' records are still being written: report nothing.
		return c, errors.Join(err, fmt.Errorf("%s: %d goroutines did not stop within %v", name, n, p.stopGrace))
	}
	c.firstErr = first.Err
	var secSum time.Duration
	for i := range workers {
		w := &workers[i]
		c.acquired += w.acquired
		c.perG = append(c.perG, w.acquired)
		c.waits = append(c.waits, w.waits...)
		c.grants = append(c.grants, w.grants...)
		c.releases = append(c.releases, w.releases...)
		c.failed += w.failed
		secSum += w.secSum
	}
	if c.acquired > 0 {
		c.sectionMean = secSum / time.Duration(c.acquired)
	}
	return c, err
}

// spread returns the minimum, maximum and mean of counts.
func spread(counts []int64) (lo, hi int64, mean float64) {
	if len(counts) == 0 {
		return 0, 0, 0
	}
	lo, hi = slices.Min(counts), slices.Max(counts)
	var sum int64
	for _, n := range counts {
		sum += n
	}
	return lo, hi, float64(sum) / float64(len(counts))
}

package main

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// counter is an atomic counter on a cache line of its own, so that
// goroutines counting side by side do not slow each other down.
type counter struct {
	atomic.Int64
	_ [56]byte
}

// firstError keeps the first error reported to it.
type firstError struct {
	once sync.Once
	err  error
}

func (f *firstError) set(err error) { f.once.Do(func() { f.err = err }) }

// countdown closes done when its count reaches target.
type countdown struct {
	n      atomic.Int64
	target int64
	once   sync.Once
	done   chan struct{}
}

func newCountdown(target int) *countdown {
	return &countdown{target: int64(target), done: make(chan struct{})}
}

func (c *countdown) add(k int64) {
	if c.n.Add(k) >= c.target {
		c.once.Do(func() { close(c.done) })
	}
}

// window measures the server's counters, the measured clients' command
// count and this process's CPU across a measured window.
type window struct {
	stats      *statsReader
	sent       *atomic.Int64 // the measured clients' command counter
	before     redisSnap
	sentBefore int64
	cpuBefore  time.Duration
	delta      redisSnap     // the counters' growth, after end
	cpu        time.Duration // this process's CPU time in the window
}

func (w *window) start(ctx context.Context) error {
	s, err := w.stats.snap(ctx)
	w.before, w.sentBefore = s, w.sent.Load()
	w.cpuBefore = processCPU()
	return err
}

func (w *window) end(ctx context.Context) error {
	w.cpu = processCPU() - w.cpuBefore
	sent := w.sent.Load()
	s, err := w.stats.snap(ctx)
	if err != nil {
		return err
	}
	w.delta = s.sub(w.before)
	w.delta.client = sent - w.sentBefore
	return nil
}

// waitGroup waits for wg, at most grace. It reports whether wg finished.
func waitGroup(wg *sync.WaitGroup, grace time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(grace):
		return false
	}
}

// processCPU is this process's user plus system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile returns the q-quantile (0..1) of ds by nearest rank.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// median returns the median of rs, 0 if empty.
func median(rs []float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	s := slices.Clone(rs)
	slices.Sort(s)
	return s[len(s)/2]
}

// fmtRange prints the lowest and highest of rates.
func fmtRange(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	return fmtRate(slices.Min(rs)) + ".." + fmtRate(slices.Max(rs))
}

package main

import (
	"context"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
	stats      *redisstat.Reader
	sent       *atomic.Int64 // the measured clients' command counter
	before     redisstat.Snap
	sentBefore int64
	cpuBefore  time.Duration
	delta      redisstat.Snap // the counters' growth, after end
	cpu        time.Duration  // this process's CPU time in the window
}

func (w *window) start(ctx context.Context) error {
	s, err := w.stats.Snap(ctx)
	w.before, w.sentBefore = s, w.sent.Load()
	w.cpuBefore = loadgen.ProcessCPU()
	return err
}

func (w *window) end(ctx context.Context) error {
	w.cpu = loadgen.ProcessCPU() - w.cpuBefore
	sent := w.sent.Load()
	s, err := w.stats.Snap(ctx)
	if err != nil {
		return err
	}
	w.delta = s.Sub(w.before)
	w.delta.Client = sent - w.sentBefore
	return nil
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

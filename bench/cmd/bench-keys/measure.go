package main

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
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

// add counts k and returns the new count.
func (c *countdown) add(k int64) int64 {
	n := c.n.Add(k)
	if n >= c.target {
		c.once.Do(func() { close(c.done) })
	}
	return n
}

// wait waits until the count reaches its target or limit passes; it
// reports whether the target was reached.
func (c *countdown) wait(limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// window measures the server's counters (package redisstat), the measured
// clients' command count (package cmdcount) and this process's CPU across a
// measured window.
type window struct {
	stats      *redisstat.Reader
	sent       *atomic.Int64
	before     redisstat.Snap
	sentBefore int64
	cpuBefore  time.Duration
	delta      redisstat.Snap // the counters' growth, Client set, after end
	cpu        time.Duration  // this process's CPU time in the window
}

func (w *window) start(ctx context.Context) error {
	s, err := w.stats.Snap(ctx)
	w.before, w.sentBefore, w.cpuBefore = s, w.sent.Load(), loadgen.ProcessCPU()
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

// evalsha is the number of script and function calls in a delta.
func evalsha(s redisstat.Snap) int64 { return s.Scripts().Calls }

// scriptUsec is the server time of the script and function calls in a
// delta, their redis.calls included.
func scriptUsec(s redisstat.Snap) int64 { return s.Scripts().Usec }

// maxTracker keeps the highest value it was shown.
type maxTracker struct{ v atomic.Int64 }

func (m *maxTracker) see(n int64) {
	for {
		cur := m.v.Load()
		if n <= cur || m.v.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Package loadgen holds what the benchmark commands' load loops share:
// per-goroutine counters, first-error capture, a countdown to the last job,
// a bounded wait for the goroutines to stop, this process's CPU time,
// latency percentiles and the median of the rounds' rates.
package loadgen

import (
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Counter is an atomic counter on a cache line of its own, so that
// goroutines counting side by side do not slow each other down.
type Counter struct {
	atomic.Int64
	_ [56]byte
}

// FirstError keeps the first error reported to it.
type FirstError struct {
	once sync.Once
	// Err is the first error Set was given, nil if none.
	Err error
}

// Set records err if it is the first error reported.
func (f *FirstError) Set(err error) { f.once.Do(func() { f.Err = err }) }

// Countdown closes Done when its count reaches its target: how a cell
// learns that its last job has started, or its last outcome was recorded.
type Countdown struct {
	n      atomic.Int64
	target int64
	once   sync.Once
	done   chan struct{}
}

// NewCountdown returns a Countdown to target.
func NewCountdown(target int) *Countdown {
	return &Countdown{target: int64(target), done: make(chan struct{})}
}

// Add counts k and returns the new count.
func (c *Countdown) Add(k int64) int64 {
	n := c.n.Add(k)
	if n >= c.target {
		c.once.Do(func() { close(c.done) })
	}
	return n
}

// Count returns the count so far.
func (c *Countdown) Count() int64 { return c.n.Load() }

// Done is closed when the count reaches the target.
func (c *Countdown) Done() <-chan struct{} { return c.done }

// Wait waits until the count reaches its target or limit passes; it
// reports whether the target was reached.
func (c *Countdown) Wait(limit time.Duration) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-c.done:
		return true
	case <-t.C:
		return false
	}
}

// WaitGroup waits for wg, at most grace. It reports whether wg finished.
func WaitGroup(wg *sync.WaitGroup, grace time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(grace):
		return false
	}
}

// ProcessCPU returns the user plus system CPU time this process has used.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Percentile returns the q-quantile (0..1) of ds by nearest rank.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1)+0.5)]
}

// Median returns the median of rs (the upper one of an even count), 0 if
// empty: a cell's figure over its rounds.
func Median(rs []float64) float64 {
	if len(rs) == 0 {
		return 0
	}
	s := slices.Clone(rs)
	slices.Sort(s)
	return s[len(s)/2]
}

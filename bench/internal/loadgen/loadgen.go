// Package loadgen holds what the benchmark commands' load loops share:
// per-goroutine counters, first-error capture, a bounded wait for the
// goroutines to stop, this process's CPU time and latency percentiles.
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

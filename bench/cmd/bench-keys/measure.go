package main

import (
	"sync/atomic"

	"github.com/batonhq/baton/bench/internal/redisstat"
)

// scriptCalls is the number of script and function calls in a delta.
func scriptCalls(s redisstat.Snap) int64 { return s.Scripts().Calls }

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

package batonlock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Limits on what a caller may ask for.
const (
	// MaxLimit is the largest number of slots a key may have.
	MaxLimit = 1 << 20
	// MaxKeyLen is the longest key in bytes.
	MaxKeyLen = 4096
	// MinTTL is the shortest lease.
	MinTTL = 10 * time.Millisecond
)

// Config configures a Locker. The zero value is valid; nil means the zero value.
type Config struct {
	// TTL is the lease duration used when AcquireOpts.TTL is zero: how long
	// a crashed holder keeps its slot. Default 10s; at least MinTTL.
	TTL time.Duration

	// WaitTTL is how long a waiter's place in a queue is kept without being
	// refreshed. A waiting Acquire refreshes it every WaitTTL/3, so the place
	// of a waiter whose process died is given up after at most WaitTTL.
	// Default 10s; at least 3 × MinTTL.
	WaitTTL time.Duration

	// Logger receives warnings about failed heartbeats and about waits
	// given up that could not be confirmed to the backend. Default
	// slog.Default().
	Logger *slog.Logger

	// OnAcquire, if set, is called at the end of every TryAcquire and
	// Acquire call, for metrics (package batonprom uses it). It must be
	// quick and must not block.
	OnAcquire func(*AcquireEvent)
}

// AcquireEvent describes one TryAcquire or Acquire call.
type AcquireEvent struct {
	Key string
	// Blocking reports an Acquire; false a TryAcquire.
	Blocking bool
	// Granted reports that the call returned a lease.
	Granted bool
	// Took is how long the call took: for Acquire, the wait.
	Took time.Duration
}

// AcquireOpts are per-call options. nil means the zero value: a mutex (one
// slot) with the Locker's TTL and a heartbeat at a third of it.
type AcquireOpts struct {
	// Limit is the number of slots of the key: 1 is a mutex, N a semaphore
	// of N. Default 1; at most MaxLimit. A limit stored with SetLimit takes
	// precedence. Callers of one key should agree on it: the last acquirer's
	// Limit becomes the key's default until SetLimit overrides it.
	Limit int

	// TTL is the lease duration. Default Config.TTL. At least MinTTL.
	TTL time.Duration

	// NoHeartbeat turns off the heartbeat: the lease then ends after TTL
	// unless extended with Lease.Extend.
	NoHeartbeat bool

	// HeartbeatInterval is the time between heartbeats, each extending the
	// lease to a full TTL; a failed heartbeat is retried at once, and if
	// that fails too, every quarter of it. Default TTL/3. It must be shorter than TTL less the safety margin
	// of Lease.Until (1% of TTL plus 2ms); if Lease.Extend makes the TTL too
	// short for it, heartbeats come every third of the new TTL.
	HeartbeatInterval time.Duration

	// OnWait, if set, is called once by Acquire when the caller has to wait,
	// with its 1-based position in the key's queue.
	OnWait func(position int)
}

// resolved are the options of one call with defaults filled in.
type resolved struct {
	limit     int
	ttl       time.Duration
	heartbeat time.Duration // 0 = off
	onWait    func(int)
}

func (l *Locker) resolve(key string, o *AcquireOpts) (resolved, error) {
	if err := checkKey(key); err != nil {
		return resolved{}, err
	}
	if o == nil {
		o = &AcquireOpts{}
	}
	r := resolved{limit: o.Limit, ttl: o.TTL, onWait: o.OnWait}
	if r.limit == 0 {
		r.limit = 1
	}
	if r.limit < 0 || r.limit > MaxLimit {
		return r, fmt.Errorf("batonlock: key %q: %w: Limit %d out of range 1..%d", key, batondriver.ErrBadParams, o.Limit, MaxLimit)
	}
	if r.ttl == 0 {
		r.ttl = l.ttl
	}
	if r.ttl < MinTTL {
		return r, fmt.Errorf("batonlock: key %q: %w: TTL %v shorter than %v", key, batondriver.ErrBadParams, o.TTL, MinTTL)
	}
	if !o.NoHeartbeat {
		r.heartbeat = o.HeartbeatInterval
		if r.heartbeat == 0 {
			r.heartbeat = r.ttl / 3
		}
		if r.heartbeat < 0 || r.heartbeat >= r.ttl-margin(r.ttl) {
			return r, fmt.Errorf("batonlock: key %q: %w: HeartbeatInterval %v must be positive and shorter than TTL %v", key, batondriver.ErrBadParams, o.HeartbeatInterval, r.ttl)
		}
	}
	return r, nil
}

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("batonlock: %w: empty key", batondriver.ErrBadParams)
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("batonlock: %w: key of %d bytes longer than %d", batondriver.ErrBadParams, len(key), MaxKeyLen)
	}
	return nil
}

// margin is how much earlier than the backend a holder considers its lease
// over: 1% of the TTL for clock rate differences plus 2ms for the
// millisecond rounding of server times.
func margin(ttl time.Duration) time.Duration {
	return ttl/100 + 2*time.Millisecond
}

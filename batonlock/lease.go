package batonlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Lease is a held slot of a key. Its Context is cancelled the moment the
// lease can no longer be trusted: when it is released, when the backend
// reports it lost, or when its validity (Until) runs out before a heartbeat
// could confirm it. Work done under a lease should stop when Done closes and
// pass Fence to the systems it writes to (see docs/locking.md).
type Lease struct {
	locker *Locker
	key    string
	token  string
	fence  uint64

	ctx    context.Context
	cancel context.CancelCauseFunc

	// extending admits one extension at a time: replies taken in another
	// order than the backend ran the calls could move Until past the
	// backend's expiry.
	extending chan struct{}
	// releasing admits one Release at a time: a second one waits for the
	// first's result instead of asking the backend again, which would say
	// the lease is not held.
	releasing chan struct{}

	mu       sync.Mutex
	ttl      time.Duration
	until    time.Time
	expiry   *time.Timer
	released bool
	stopHB   chan struct{} // closed to stop the heartbeat; nil without one
	hbDone   chan struct{}
	extended chan struct{} // tells the heartbeat of an Extend; nil without one
}

// newLease starts a lease whose backend expiry is no earlier than expires,
// on this process's monotonic clock.
func (l *Locker) newLease(ctx context.Context, key, token string, r resolved, fence uint64, expires time.Time) *Lease {
	lctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	ls := &Lease{
		locker: l, key: key, token: token, fence: fence,
		ctx: lctx, cancel: cancel, ttl: r.ttl,
		until:     expires.Add(-margin(r.ttl)),
		extending: make(chan struct{}, 1),
		releasing: make(chan struct{}, 1),
	}
	ls.mu.Lock()
	ls.expiry = time.AfterFunc(time.Until(ls.until), ls.expire)
	if r.heartbeat > 0 {
		ls.stopHB, ls.hbDone = make(chan struct{}), make(chan struct{})
		ls.extended = make(chan struct{}, 1)
		go ls.heartbeat(r.heartbeat, ls.stopHB)
	}
	ls.mu.Unlock()
	return ls
}

// Key returns the key the lease holds a slot of.
func (ls *Lease) Key() string { return ls.key }

// Token returns the lease's secret: 128 random bits. Only its holder can
// extend or release the lease.
func (ls *Lease) Token() string { return ls.token }

// Fence returns the lease's fencing token: strictly greater than that of
// every earlier grant of the key, on every backend, forever. A resource that
// remembers the highest fence it has seen and refuses lower ones is safe from
// a holder that acts after its lease ended.
func (ls *Lease) Fence() uint64 { return ls.fence }

// Until returns the time, on this process's monotonic clock, up to which the
// lease is known to be held: the backend's expiry less a safety margin of 1%
// of the TTL plus 2ms. Heartbeats and Extend move it forward.
func (ls *Lease) Until() time.Time {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.until
}

// Context returns a context that is cancelled when the lease ends; its
// cause (context.Cause) is ErrReleased, ErrNotHeld or ErrLeaseExpired. It
// carries the values of the context the lease was acquired with.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Done is Context().Done().
func (ls *Lease) Done() <-chan struct{} { return ls.ctx.Done() }

// Err returns nil while the lease is trusted, else why it ended:
// ErrReleased, ErrNotHeld or ErrLeaseExpired. It reads the clock: once
// Until has passed it ends the lease, should the timer that does so be
// late (a loaded machine), so that a holder that checks Err before a write
// is never told a lapsed lease is trusted.
func (ls *Lease) Err() error {
	if ls.ctx.Err() == nil {
		ls.mu.Lock()
		if !time.Now().Before(ls.until) {
			ls.cancel(ErrLeaseExpired)
		}
		ls.mu.Unlock()
		if ls.ctx.Err() == nil {
			return nil
		}
	}
	return context.Cause(ls.ctx)
}

// expire ends the lease when its validity ran out unconfirmed.
func (ls *Lease) expire() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if left := time.Until(ls.until); left > 0 {
		ls.expiry.Reset(left) // moved forward meanwhile
		return
	}
	ls.cancel(ErrLeaseExpired)
}

// Extend sets the lease to expire ttl from now (and makes ttl the duration
// later heartbeats renew). It never revives a lease that ended: it returns
// ErrNotHeld if the backend no longer has it, and the reason the lease ended
// if its context is already cancelled.
func (ls *Lease) Extend(ctx context.Context, ttl time.Duration) error {
	if ttl < MinTTL {
		return fmt.Errorf("batonlock: extend %q: %w: TTL %v shorter than %v", ls.key, batondriver.ErrBadParams, ttl, MinTTL)
	}
	if err := ls.Err(); err != nil {
		return err
	}
	if err := ls.extend(ctx, ttl); err != nil {
		return err
	}
	select {
	case ls.extended <- struct{}{}:
	default:
	}
	return nil
}

// extend extends the lease by ttl, which becomes its TTL, or by its TTL if
// ttl is 0 (the heartbeat).
func (ls *Lease) extend(ctx context.Context, ttl time.Duration) error {
	select {
	case ls.extending <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("batonlock: extend %q: %w", ls.key, context.Cause(ctx))
	}
	defer func() { <-ls.extending }()
	ls.mu.Lock()
	if ttl == 0 {
		ttl = ls.ttl
	}
	ls.ttl = ttl
	ls.mu.Unlock()
	sent := time.Now()
	res, err := ls.locker.driver.LockExtend(ctx, &batondriver.LockExtendParams{
		Key: ls.key, Token: ls.token, Fence: ls.fence, TTL: ttl,
	})
	if err != nil {
		return fmt.Errorf("batonlock: extend %q: %w", ls.key, err)
	}
	if !res.Extended {
		ls.cancel(ErrNotHeld)
		return ErrNotHeld
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.ctx.Err() == nil {
		ls.until = sent.Add(ttl - margin(ttl))
		ls.expiry.Reset(time.Until(ls.until))
	}
	return nil
}

// heartbeat extends the lease every interval, or every third of the TTL
// once Extend made the TTL too short for interval. A failed attempt is
// retried at once, then every quarter interval; if none succeeds before
// Until, the expiry timer ends the lease.
func (ls *Lease) heartbeat(interval time.Duration, stop <-chan struct{}) {
	defer close(ls.hbDone)
	every := func() time.Duration {
		ls.mu.Lock()
		defer ls.mu.Unlock()
		if interval < ls.ttl-margin(ls.ttl) {
			return interval
		}
		return ls.ttl / 3
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	failed := 0 // heartbeats failed in a row
	for {
		select {
		case <-t.C:
		case <-ls.extended:
			// Extend renewed the lease, maybe with a shorter TTL.
			t.Reset(every())
			continue
		case <-stop:
			return
		case <-ls.ctx.Done():
			return
		}
		ls.mu.Lock()
		until := ls.until
		ls.mu.Unlock()
		// An answer after Until cannot save the lease: stop waiting then.
		ctx, cancel := context.WithDeadline(ls.ctx, until)
		err := ls.extend(ctx, 0)
		cancel()
		switch {
		case err == nil:
			failed = 0
			t.Reset(every())
		case errors.Is(err, ErrNotHeld):
			return
		default:
			if ls.ctx.Err() != nil {
				return
			}
			ls.locker.log.Warn("batonlock: heartbeat failed; retrying", "key", ls.key, "err", err)
			// The first failure is retried at once: a connection that
			// broke while idle (a Redis restart, a failover) shows it only
			// on its first use, and the client reconnects for the next
			// call. Later ones a quarter interval apart.
			failed++
			if failed == 1 {
				t.Reset(time.Millisecond)
			} else {
				t.Reset(max(every()/4, time.Millisecond))
			}
		}
	}
}

// Release gives the slot back; the next waiter is granted it in the same
// step. It returns ErrNotHeld if the backend had already reclaimed the slot
// (the lease expired and someone else may have had the slot since). A lease
// that expired but was not reclaimed yet is released normally: nobody else
// had it. Calling Release again after it succeeded, or after it reported
// ErrNotHeld, returns nil, as does one called while another is under way
// and succeeds. Whatever the result, the lease's context is cancelled.
func (ls *Lease) Release(ctx context.Context) error {
	select {
	case ls.releasing <- struct{}{}:
	default: // another Release is under way: its result first
		select {
		case ls.releasing <- struct{}{}:
		case <-ctx.Done():
			ls.cancel(ErrReleased)
			return fmt.Errorf("batonlock: release %q: %w", ls.key, context.Cause(ctx))
		}
	}
	defer func() { <-ls.releasing }()
	ls.mu.Lock()
	if ls.released {
		ls.mu.Unlock()
		return nil
	}
	stop := ls.stopHB
	ls.stopHB = nil
	ls.mu.Unlock()
	// Cancel first: that also ends a heartbeat's call in flight, which
	// would otherwise hold Release up to Until.
	ls.cancel(ErrReleased)
	if stop != nil {
		close(stop)
		<-ls.hbDone
	}
	res, err := ls.locker.driver.LockRelease(ctx, &batondriver.LockReleaseParams{
		Key: ls.key, Token: ls.token, Fence: ls.fence,
	})
	if err != nil {
		// Not marked released: the caller may try again; else the
		// backend lets the lease expire.
		return fmt.Errorf("batonlock: release %q: %w", ls.key, err)
	}
	ls.mu.Lock()
	ls.released = true
	ls.expiry.Stop()
	ls.mu.Unlock()
	if !res.Released {
		return ErrNotHeld
	}
	return nil
}

// run calls fn under the lease and releases it afterwards, even if fn
// panics. If the lease ended while fn ran, the reason is joined to fn's
// error: fn did not hold the slot throughout.
func (ls *Lease) run(ctx context.Context, fn func(context.Context, *Lease) error) (err error) {
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(ls.ctx, func() { cancel(context.Cause(ls.ctx)) })
	defer func() {
		stop()
		cancel(nil)
		lost := ls.Err()
		rerr := ls.Release(context.WithoutCancel(ctx))
		if lost != nil {
			err = errors.Join(err, lost)
		}
		if rerr != nil && !errors.Is(lost, rerr) {
			err = errors.Join(err, rerr)
		}
	}()
	return fn(fnCtx, ls)
}

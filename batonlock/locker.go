package batonlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Locker hands out leases on keys of a backend. It is safe for concurrent
// use; one Locker per process and backend is typical.
type Locker struct {
	driver  batondriver.LockDriver
	ttl     time.Duration
	waitTTL time.Duration
	log     *slog.Logger

	onAcquire func(*AcquireEvent)
}

// New returns a Locker on driver. It does not contact the backend. It
// returns an error for a nil driver or a Config.TTL or Config.WaitTTL below
// its minimum.
func New(driver batondriver.LockDriver, cfg *Config) (*Locker, error) {
	if driver == nil {
		return nil, errors.New("batonlock: nil driver")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	l := &Locker{driver: driver, ttl: cfg.TTL, waitTTL: cfg.WaitTTL, log: cfg.Logger, onAcquire: cfg.OnAcquire}
	if l.ttl == 0 {
		l.ttl = 10 * time.Second
	}
	if l.ttl < MinTTL {
		return nil, fmt.Errorf("batonlock: Config.TTL %v shorter than %v", cfg.TTL, MinTTL)
	}
	if l.waitTTL == 0 {
		l.waitTTL = 10 * time.Second
	}
	if l.waitTTL < 3*MinTTL {
		return nil, fmt.Errorf("batonlock: Config.WaitTTL %v shorter than %v", cfg.WaitTTL, 3*MinTTL)
	}
	if l.log == nil {
		l.log = slog.Default()
	}
	return l, nil
}

// TryAcquire makes one attempt to take a slot of key. It returns
// ErrNotAcquired when every slot is held or earlier callers are waiting for
// one (a TryAcquire never overtakes a waiter). A slot granted by a reply
// that came too late for the lease to be trusted (held up in the network
// longer than the TTL) is confirmed with the backend at once, as an Extend
// would; if the backend no longer holds it, TryAcquire returns an error
// that wraps ErrLeaseExpired. So a returned lease is never over already.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts *AcquireOpts) (*Lease, error) {
	began := time.Now()
	lease, err := l.tryAcquire(ctx, key, opts)
	l.observe(key, false, lease, began)
	return lease, err
}

// observe reports a finished acquire call to Config.OnAcquire.
func (l *Locker) observe(key string, blocking bool, lease *Lease, began time.Time) {
	if l.onAcquire != nil {
		l.onAcquire(&AcquireEvent{Key: key, Blocking: blocking, Granted: lease != nil, Took: time.Since(began)})
	}
}

func (l *Locker) tryAcquire(ctx context.Context, key string, opts *AcquireOpts) (*Lease, error) {
	r, err := l.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	sent := time.Now()
	res, err := l.driver.LockAcquire(ctx, &batondriver.LockAcquireParams{
		Key: key, Token: token, Limit: r.limit, TTL: r.ttl,
	})
	if err != nil {
		return nil, fmt.Errorf("batonlock: acquire %q: %w", key, err)
	}
	if !res.Granted {
		return nil, ErrNotAcquired
	}
	lease, err := l.arrived(ctx, key, token, r, res.Fence, sent.Add(res.TTL))
	if errors.Is(err, errLateGrant) {
		return nil, fmt.Errorf("batonlock: acquire %q: granted, but the reply came after the lease ran out: %w", key, ErrLeaseExpired)
	}
	return lease, err
}

// errLateGrant: a grant whose reply came after its lease could be trusted,
// and which the backend no longer held when asked.
var errLateGrant = errors.New("batonlock: the grant's lease ran out before its reply came")

// arrived returns the lease of a grant of key to token, whose lease lasts
// until expires (no earlier, by this process's clock) with fence. If that
// time less the safety margin has passed already (the reply was held up in
// the network, or this process stalled, longer than the TTL), the lease
// cannot be trusted as it stands: the backend is asked to extend it, as
// Extend does, and the lease lasts from that call; if the backend no
// longer holds it, arrived returns errLateGrant; if the call fails, it
// gives back the slot and returns the error. Without this, Acquire would
// return a lease whose context had already ended.
func (l *Locker) arrived(ctx context.Context, key, token string, r resolved, fence uint64, expires time.Time) (*Lease, error) {
	if time.Now().Before(expires.Add(-margin(r.ttl))) {
		return l.newLease(ctx, key, token, r, fence, expires), nil
	}
	sent := time.Now()
	res, err := l.driver.LockExtend(ctx, &batondriver.LockExtendParams{Key: key, Token: token, Fence: fence, TTL: r.ttl})
	if err != nil {
		l.giveBack(ctx, key, token)
		return nil, fmt.Errorf("batonlock: acquire %q: confirming a late grant: %w", key, err)
	}
	if !res.Extended {
		return nil, errLateGrant
	}
	return l.newLease(ctx, key, token, r, fence, sent.Add(r.ttl)), nil
}

// Acquire takes a slot of key, waiting in first-come, first-served order
// until one is granted or ctx ends. A waiter is woken only when a slot is
// granted to it; it does not poll. If ctx ends, Acquire leaves the queue,
// gives back a slot granted meanwhile, and returns ctx's error; a call it
// had in flight does nothing when it reaches the backend later (for
// Config.WaitTTL). It waits at most 100ms for an unreachable backend to
// confirm the give-up, after which the place expires on its own. A grant
// whose news came too late for its lease to be trusted is confirmed as
// TryAcquire's is; if the backend no longer holds it, Acquire queues again,
// at the back. So a returned lease is never over already. A recheck of
// the waiter's place that fails (a connection cut, a failover) is made
// again as long as the place may still live on the backend (WaitTTL after
// the last call that reached it): a short outage costs neither the wait
// nor the place; a longer one ends the wait with the error.
func (l *Locker) Acquire(ctx context.Context, key string, opts *AcquireOpts) (*Lease, error) {
	began := time.Now()
	lease, err := l.acquire(ctx, key, opts)
	l.observe(key, true, lease, began)
	return lease, err
}

func (l *Locker) acquire(ctx context.Context, key string, opts *AcquireOpts) (*Lease, error) {
	r, err := l.resolve(key, opts)
	if err != nil {
		return nil, err
	}
	for {
		lease, err := l.acquireOnce(ctx, key, r)
		if !errors.Is(err, errLateGrant) {
			return lease, err
		}
		l.log.Warn("batonlock: a grant came too late to be trusted and was lost meanwhile; waiting again", "key", key)
	}
}

// acquireOnce queues for a slot of key under a token of its own, as
// Acquire does, and returns errLateGrant if the grant came too late.
func (l *Locker) acquireOnce(ctx context.Context, key string, r resolved) (*Lease, error) {
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	// Listen before queueing, so that no grant can be missed.
	lis, err := l.driver.LockListen(ctx, &batondriver.LockListenParams{Key: key, Token: token})
	if err != nil {
		return nil, fmt.Errorf("batonlock: acquire %q: %w", key, err)
	}
	defer lis.Close()

	p := &batondriver.LockAcquireParams{
		Key: key, Token: token, Limit: r.limit, TTL: r.ttl, Wait: true, WaitTTL: l.waitTTL,
	}
	sent := time.Now()
	res, err := l.driver.LockAcquire(ctx, p)
	if err != nil {
		if !errors.Is(err, batondriver.ErrBadParams) {
			// The call may have run, or may yet: take back what it did.
			l.giveBack(ctx, key, token)
		}
		return nil, fmt.Errorf("batonlock: acquire %q: %w", key, err)
	}
	if !res.Granted && r.onWait != nil {
		r.onWait(res.Position)
	}
	p.Recheck = true
	timer := time.NewTimer(0)
	defer timer.Stop()
	for !res.Granted {
		timer.Reset(l.recheckIn(res))
		select {
		case n := <-lis.C():
			// The grant's lease started at the backend's GrantedAt. The
			// last call was sent at `sent` and ran at res.Now, no
			// earlier, so the lease ends no earlier than this, if the
			// backend's clock ran as this process's did. Both times are
			// whole milliseconds (Redis), so the grant may have come up
			// to one less after the call than they say.
			granted := sent.Add(n.GrantedAt.Sub(res.Now) - time.Millisecond)
			// A grant from before the last call is stale: that call found
			// the waiter queued, so the lease ran out meanwhile and the
			// slot may be another's. One placed after the notice came is
			// impossible: the backend's clock jumped forward since the
			// last call (or back, for a stale one), and the lease may end
			// sooner than it says. Ask the backend instead.
			if !n.Recheck && !n.GrantedAt.Before(res.Now) && !granted.After(time.Now()) {
				return l.arrived(ctx, key, token, r, n.Fence, granted.Add(n.TTL))
			}
		case <-timer.C:
		case <-ctx.Done():
			l.giveBack(ctx, key, token)
			return nil, fmt.Errorf("batonlock: acquire %q: %w", key, context.Cause(ctx))
		}
		if sent, res, err = l.recheck(ctx, p, sent.Add(l.waitTTL)); err != nil {
			l.giveBack(ctx, key, token)
			return nil, fmt.Errorf("batonlock: acquire %q: %w", key, err)
		}
	}
	return l.arrived(ctx, key, token, r, res.Fence, sent.Add(res.TTL))
}

// Pauses between the tries of a recheck that fails.
const (
	recheckFirstPause = 10 * time.Millisecond
	recheckMaxPause   = 500 * time.Millisecond
)

// recheck asks the backend for the waiter's place again (p.Recheck), and
// returns when its call was sent and its result. A call that fails (a
// connection cut, a Cluster failing a master over) leaves the place where
// it was, alive on the backend until alive (WaitTTL after the last call
// that reached it was sent): it is made again after a pause, doubling from
// recheckFirstPause up to recheckMaxPause, as long as the place may still
// be alive after it and ctx lasts. So a short outage costs a waiter
// neither its wait nor its place in line; a longer one ends the wait with
// the last error before the place could have lapsed.
func (l *Locker) recheck(ctx context.Context, p *batondriver.LockAcquireParams, alive time.Time) (time.Time, *batondriver.LockAcquireResult, error) {
	pause := recheckFirstPause
	for {
		sent := time.Now()
		res, err := l.driver.LockAcquire(ctx, p)
		if err == nil || errors.Is(err, batondriver.ErrBadParams) || ctx.Err() != nil ||
			!time.Now().Add(pause).Before(alive) {
			return sent, res, err
		}
		l.log.Warn("batonlock: a waiter's recheck failed; asking again while its place lasts", "key", p.Key, "err", err)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return sent, nil, fmt.Errorf("%w (a recheck failed: %w)", context.Cause(ctx), err)
		case <-t.C:
		}
		pause = min(2*pause, recheckMaxPause)
	}
}

// recheckIn is when a waiter asks the backend again if no notice came: in
// time to refresh its place, and soon after the earliest holder's lease
// could expire (a crashed holder sends no release, so no notice follows).
func (l *Locker) recheckIn(res *batondriver.LockAcquireResult) time.Duration {
	d := l.waitTTL / 3
	if res.NextExpiry > 0 {
		d = min(d, res.NextExpiry+time.Millisecond)
	}
	return max(d, time.Millisecond)
}

// giveBack removes a waiter that stops waiting, and releases a slot granted
// to it meanwhile. If its last call has not run yet (its reply was cut off
// by ctx), the backend marks the token gone for WaitTTL, so that the call,
// when it runs, neither queues it nor grants it a slot. A healthy backend
// answers at once; an unreachable one must not hold Acquire past its
// context for long, so giveBack waits at most 100ms and lets the attempt go
// on in the background while the waiter's place lives. If it fails, the
// place and any slot granted to it expire on their own.
func (l *Locker) giveBack(ctx context.Context, key, token string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.waitTTL)
		defer cancel()
		p := &batondriver.LockReleaseParams{Key: key, Token: token, WaitTTL: l.waitTTL}
		if _, err := l.driver.LockRelease(ctx, p); err != nil {
			l.log.Warn("batonlock: giving back an abandoned wait failed; it expires on its own", "key", key, "err", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(100 * time.Millisecond):
	}
}

// TryDo runs fn while holding a slot of key, if one can be had at once. ran
// reports whether fn ran; err is fn's error, or the error that stopped fn
// from running (other than ErrNotAcquired), joined with the reason
// (ErrLeaseExpired, ErrNotHeld) if the lease ended before fn returned. fn's ctx ends when ctx does or the
// lease is lost. The slot is released when fn returns or panics.
func (l *Locker) TryDo(ctx context.Context, key string, opts *AcquireOpts, fn func(ctx context.Context, lease *Lease) error) (ran bool, err error) {
	lease, err := l.TryAcquire(ctx, key, opts)
	if errors.Is(err, ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, lease.run(ctx, fn)
}

// Do runs fn while holding a slot of key, waiting for one as Acquire does.
// It returns fn's error or the error that stopped fn from running, joined
// with the reason (ErrLeaseExpired, ErrNotHeld) if the lease ended before fn
// returned. fn's ctx
// ends when ctx does or the lease is lost. The slot is released when fn
// returns or panics.
func (l *Locker) Do(ctx context.Context, key string, opts *AcquireOpts, fn func(ctx context.Context, lease *Lease) error) error {
	lease, err := l.Acquire(ctx, key, opts)
	if err != nil {
		return err
	}
	return lease.run(ctx, fn)
}

// SetLimit stores n as key's number of slots, overriding the Limit callers
// pass, for every process sharing the backend. 0 halts the key: nobody new is
// granted a slot and waiters keep their places. Raising the limit grants
// waiters at once; lowering it lets current holders finish and grants no more
// until the key is under the new limit.
func (l *Locker) SetLimit(ctx context.Context, key string, n int) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if n < 0 || n > MaxLimit {
		return fmt.Errorf("batonlock: key %q: %w: limit %d out of range 0..%d", key, batondriver.ErrBadParams, n, MaxLimit)
	}
	if _, err := l.driver.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: key, Limit: n}); err != nil {
		return fmt.Errorf("batonlock: set limit of %q: %w", key, err)
	}
	return nil
}

// ResetLimit removes key's stored limit; the Limit callers pass applies again.
func (l *Locker) ResetLimit(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if _, err := l.driver.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: key, Reset: true}); err != nil {
		return fmt.Errorf("batonlock: reset limit of %q: %w", key, err)
	}
	return nil
}

// Holder is one holder of a key, as Inspect reports it.
type Holder = batondriver.LockHolder

// Waiter is one waiter of a key, as Inspect reports it.
type Waiter = batondriver.LockWaiter

// Info is the state of a key.
type Info struct {
	Key string
	// Limit is the key's number of slots: the stored limit if Override,
	// else the last acquirer's Limit; 0 for a key never used, or idle and
	// forgotten (on Redis an idle TTL after its last use, by default a
	// minute; in memory at once).
	Limit    int
	Override bool
	// LastFence is the last fencing token issued for the key; 0 once the
	// key is forgotten (later fences are higher all the same, unless the
	// backend's clock stepped back: docs/locking.md).
	LastFence uint64
	// Holders are the unexpired holders by fence.
	Holders []Holder
	// Waiters are in the order they will be granted; a backend may list only
	// the first ones (Redis: 1000). WaiterCount counts them all.
	Waiters     []Waiter
	WaiterCount int
}

// Inspect reports key's holders, waiters and limit.
func (l *Locker) Inspect(ctx context.Context, key string) (*Info, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	res, err := l.driver.LockInspect(ctx, &batondriver.LockInspectParams{Key: key})
	if err != nil {
		return nil, fmt.Errorf("batonlock: inspect %q: %w", key, err)
	}
	return newInfo(key, res), nil
}

// newToken returns 128 random bits, URL-safe.
func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("batonlock: token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

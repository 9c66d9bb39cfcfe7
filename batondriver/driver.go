// Package batondriver is the seam between Baton and its storage backends.
//
// A Driver performs one atomic transition per method: every method either
// happens entirely or not at all, as seen by every process sharing the
// backend. Time-based decisions (expiry, ordering) are made with the
// backend's own clock, never with a caller's wall clock. A call whose
// context has ended does nothing and returns an error: ErrBadParams if its
// parameters are invalid, on every backend (they are checked first: a
// programming error, whatever the timing), else the context's. A refusal
// that depends on stored state (a running job cannot be deleted) needs the
// backend, so an ended context goes before it.
//
// The interface serves Baton's own packages. It may change between minor
// versions; backends outside this module should expect to follow it. Every
// backend must pass the conformance suite in package batondrivertest.
package batondriver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Driver is a storage backend for Baton: locks and jobs.
//
// Implementations must be safe for concurrent use by many goroutines.
type Driver interface {
	LockDriver
	JobDriver
}

// LockDriver is the lock half of a backend, all that package batonlock
// needs: the atomic transitions of a lock key.
type LockDriver interface {
	// LockAcquire grants a slot of the key to Token if one is free and no
	// earlier waiter is queued (waiters are never overtaken). Expired holders
	// and waiters are removed first, and their slots go to waiters in arrival
	// order. If the slot cannot be granted and Wait is set, Token joins the
	// back of the key's FIFO wait queue; a Token already queued leaves its
	// place for the back (it is queued once). Only Recheck keeps a place.
	// With Recheck, Token is a waiter asking again: if it was granted a slot
	// while it waited, the result reports that grant; if it is still queued,
	// it keeps its place, for WaitTTL more; if its place expired, or the
	// lease it was granted ran out before it asked, it asks anew as a
	// waiter.
	// A Token that gave up before its waiting call ran (see LockRelease) is
	// neither granted nor queued by it: Granted false, Position 0 — unless
	// it holds a slot, taken since by a Try (which no give-up stops): then
	// the call reports that grant, as below.
	//
	// A Token that holds a slot is granted no second one, by a Try or a
	// Wait as by a Recheck: whether slots are free or not, the call reports
	// that grant (Granted, its Fence, the TTL it has left; the lease is not
	// extended), issues no fence and does not queue Token. A call sent
	// again with the same Token so never holds two slots nor ends the lease
	// it was granted. A lease that ran out is held no more: its Token asks
	// anew. What Token holds is looked at before whether it gave up, in
	// every mode: Granted always reports a slot Token holds.
	LockAcquire(ctx context.Context, p *LockAcquireParams) (*LockAcquireResult, error)

	// LockRelease removes Token from the key, whether it holds a slot or
	// waits for one, and grants freed slots to the waiters at the head of the
	// queue in the same step, notifying each of them.
	//
	// A waiter gives up with Fence 0. A waiting or rechecking LockAcquire of
	// Token may still be on its way then: sent before the give-up, its reply
	// cut off by the caller's deadline, it can run after it — on Redis, for
	// one, when the call is sent again as EVAL after a NOSCRIPT reply, or
	// travels on another of the client's connections. So the backend
	// remembers for WaitTTL that Token gave up, and such a call neither
	// grants Token a slot nobody would use nor queues it again.
	LockRelease(ctx context.Context, p *LockReleaseParams) (*LockReleaseResult, error)

	// LockExtend sets a held lease to expire TTL from now. A lease that has
	// already expired is never extended: the call reports Extended false.
	LockExtend(ctx context.Context, p *LockExtendParams) (*LockExtendResult, error)

	// LockSetLimit stores (or, with Reset, removes) the key's limit override
	// and grants slots freed by a raised limit to waiters in the same step.
	LockSetLimit(ctx context.Context, p *LockSetLimitParams) (*LockSetLimitResult, error)

	// LockInspect reports the key's unexpired holders, its waiters in
	// order, and its limit. It changes nothing.
	LockInspect(ctx context.Context, p *LockInspectParams) (*LockInspectResult, error)

	// LockList lists the keys in use — with unexpired holders or waiters, or
	// a limit override — a page at a time, each as LockInspect reports it.
	// It reads an index of keys, never a scan of the backend; each key is
	// inspected atomically, the page as a whole is no snapshot. A backend
	// may prune idle keys from its index as it lists (LockListResult).
	LockList(ctx context.Context, p *LockListParams) (*LockListResult, error)

	// LockListen registers interest in grants made to Token on Key by
	// another caller's transition. It must be called before Token joins the
	// wait queue, so that no grant can be missed; when it returns, delivery
	// is established.
	LockListen(ctx context.Context, p *LockListenParams) (LockListener, error)
}

// LockListener delivers the notices for one waiting token.
type LockListener interface {
	// C delivers notices. It is never closed; stop receiving after Close.
	C() <-chan LockNotice
	// Close stops delivery and releases the listener's resources. It is
	// safe to call more than once.
	Close()
}

// LockNotice tells a waiter that it was granted a slot, or, with Recheck set,
// that notices may have been lost (for example after a reconnect) and it
// should ask the backend with LockAcquire.
type LockNotice struct {
	Recheck bool
	// Fence is the fencing token of the grant.
	Fence uint64
	// GrantedAt is the backend's time of the grant.
	GrantedAt time.Time
	// TTL is the lease duration from GrantedAt.
	TTL time.Duration
}

// LockAcquireParams are the parameters of LockAcquire.
type LockAcquireParams struct {
	// Key names the lock. Any non-empty byte string.
	Key string
	// Token identifies the caller's lease; random and unguessable. Any
	// non-empty byte string without ':' or '|', which backends may use as
	// separators (Redis stores holders as "fence:token" and notifies
	// waiters with "token|fence|…"); every lock call refuses other tokens
	// with ErrBadParams. Base64url and hex (batonlock's tokens, the
	// suite's) qualify.
	Token string
	// Limit is the key's slot count used when no override is stored with
	// LockSetLimit. It also becomes the key's default for later transitions.
	Limit int
	// TTL is the lease duration if granted.
	TTL time.Duration
	// Wait makes the caller join the wait queue when not granted.
	Wait bool
	// WaitTTL is how long a waiter's place is kept without being refreshed
	// by a Recheck with the same Token. Required when Wait is set.
	WaitTTL time.Duration
	// Recheck marks a waiter that is already queued (it implies Wait).
	Recheck bool
}

// CheckLockAcquire checks what every backend requires of p: a Key and a
// Token (see LockAcquireParams.Token), a TTL of at least a millisecond, a Limit not negative, and, with
// Wait or Recheck, a WaitTTL of at least a millisecond. The error wraps
// ErrBadParams and names the key and the field that is wrong.
func CheckLockAcquire(p *LockAcquireParams) error {
	if err := checkLockToken(p.Key, p.Token); err != nil {
		return err
	}
	switch {
	case p.TTL < time.Millisecond:
		return lockBad(p.Key, "TTL %v is under 1ms", p.TTL)
	case p.Limit < 0:
		return lockBad(p.Key, "Limit %d is negative", p.Limit)
	case (p.Wait || p.Recheck) && p.WaitTTL < time.Millisecond:
		return lockBad(p.Key, "WaitTTL %v is under 1ms (Wait and Recheck need one)", p.WaitTTL)
	}
	return nil
}

// LockAcquireResult is the result of LockAcquire.
type LockAcquireResult struct {
	// Granted reports whether Token holds a slot.
	Granted bool
	// Fence is the grant's fencing token: strictly greater than every fence
	// issued for the key before that grant (a grant reported again keeps
	// its fence).
	Fence uint64
	// TTL is how long the granted lease has left, measured at Now.
	TTL time.Duration
	// Position is Token's 1-based place in the wait queue when it waits.
	Position int
	// NextExpiry is how long until the earliest holder's lease expires; zero
	// when there are no holders. Waiters use it to bound their safety timer.
	NextExpiry time.Duration
	// Now is the backend's time when the transition ran.
	Now time.Time
}

// LockReleaseParams are the parameters of LockRelease.
type LockReleaseParams struct {
	Key   string
	Token string
	// Fence is the fence of the held lease, or 0 when the caller does not
	// know whether it was granted (a waiter giving up).
	Fence uint64
	// WaitTTL, with Fence 0, is how long the backend remembers that Token
	// gave up: the WaitTTL of its LockAcquire calls. 0: it remembers
	// nothing.
	WaitTTL time.Duration
}

// CheckLockRelease checks what every backend requires of p: a Key and a
// Token (see LockAcquireParams.Token), and a WaitTTL of 0 or at least a millisecond. The error wraps
// ErrBadParams and names the key and the field that is wrong.
func CheckLockRelease(p *LockReleaseParams) error {
	if err := checkLockToken(p.Key, p.Token); err != nil {
		return err
	}
	if p.WaitTTL < 0 || (p.WaitTTL > 0 && p.WaitTTL < time.Millisecond) {
		return lockBad(p.Key, "WaitTTL %v is neither 0 nor at least 1ms", p.WaitTTL)
	}
	return nil
}

// LockReleaseResult is the result of LockRelease.
type LockReleaseResult struct {
	// Released reports whether Token held a slot that it gave back.
	Released bool
	// Promoted is how many waiters were granted slots by this release.
	Promoted int
}

// LockExtendParams are the parameters of LockExtend.
type LockExtendParams struct {
	Key   string
	Token string
	Fence uint64
	TTL   time.Duration
}

// CheckLockExtend checks what every backend requires of p: a Key and a
// Token (see LockAcquireParams.Token), a Fence (not 0) and a TTL of at least a millisecond. The error
// wraps ErrBadParams and names the key and the field that is wrong.
func CheckLockExtend(p *LockExtendParams) error {
	if err := checkLockToken(p.Key, p.Token); err != nil {
		return err
	}
	switch {
	case p.Fence == 0:
		return lockBad(p.Key, "Fence is 0, not a held lease's")
	case p.TTL < time.Millisecond:
		return lockBad(p.Key, "TTL %v is under 1ms", p.TTL)
	}
	return nil
}

// LockExtendResult is the result of LockExtend.
type LockExtendResult struct {
	// Extended is false when the lease was no longer held.
	Extended bool
	Now      time.Time
}

// LockSetLimitParams are the parameters of LockSetLimit.
type LockSetLimitParams struct {
	Key string
	// Limit is the new override; 0 halts the key. Ignored with Reset.
	Limit int
	// Reset removes the override; the key's default limit applies again.
	Reset bool
}

// CheckLockSetLimit checks what every backend requires of p: a Key, and,
// unless Reset is set, a Limit not negative. The error wraps ErrBadParams
// and names the key and the field that is wrong.
func CheckLockSetLimit(p *LockSetLimitParams) error {
	if err := checkLockKey(p.Key); err != nil {
		return err
	}
	if !p.Reset && p.Limit < 0 {
		return lockBad(p.Key, "Limit %d is negative", p.Limit)
	}
	return nil
}

// LockSetLimitResult is the result of LockSetLimit.
type LockSetLimitResult struct {
	// Promoted is how many waiters were granted slots by the change.
	Promoted int
}

// LockInspectParams are the parameters of LockInspect.
type LockInspectParams struct {
	Key string
}

// CheckLockInspect checks what every backend requires of p: a Key. The
// error wraps ErrBadParams.
func CheckLockInspect(p *LockInspectParams) error { return checkLockKey(p.Key) }

// LockInspectResult is the result of LockInspect.
type LockInspectResult struct {
	// Limit is the effective limit: the override if set, else the default
	// last given by an acquirer, else 0 for a key never used. A backend
	// may forget an idle key without an override (at once, or after an
	// idle TTL): then it is 0 again, and so is LastFence.
	Limit int
	// Override reports whether Limit comes from LockSetLimit.
	Override bool
	// LastFence is the last fencing token issued for the key (0 once the
	// key is forgotten; the next grant's fence is higher all the same).
	LastFence uint64
	Holders   []LockHolder
	// Waiters are in grant order. A driver may list only the first ones.
	Waiters []LockWaiter
	// WaiterCount is the number of unexpired waiters, listed or not.
	WaiterCount int
	Now         time.Time
}

// LockHolder is one unexpired holder of a key.
type LockHolder struct {
	Token string
	Fence uint64
	// TTL is the lease's remaining time at the result's Now.
	TTL time.Duration
}

// LockWaiter is one queued waiter of a key.
type LockWaiter struct {
	Token string
	// TTL is how long the waiter's place is kept without a refresh.
	TTL time.Duration
}

// LockListenParams are the parameters of LockListen.
type LockListenParams struct {
	Key   string
	Token string
}

// CheckLockListen checks what every backend requires of p: a Key and a
// Token (see LockAcquireParams.Token). The error wraps ErrBadParams and
// names the key and the field that is wrong.
func CheckLockListen(p *LockListenParams) error { return checkLockToken(p.Key, p.Token) }

// checkLockKey refuses an empty lock key.
func checkLockKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: lock Key is empty", ErrBadParams)
	}
	return nil
}

// checkLockToken refuses an empty lock key, and a token that is empty or
// holds a reserved byte (LockAcquireParams.Token). The token itself is not
// quoted: it is the lease's secret.
func checkLockToken(key, token string) error {
	if err := checkLockKey(key); err != nil {
		return err
	}
	if token == "" {
		return lockBad(key, "Token is empty")
	}
	if i := strings.IndexAny(token, ":|"); i >= 0 {
		return lockBad(key, "Token holds %q at byte %d (':' and '|' are reserved)", token[i], i)
	}
	return nil
}

// lockBad returns an ErrBadParams error about a field of a call on key.
func lockBad(key, format string, args ...any) error {
	return fmt.Errorf("%w: lock %q: %s", ErrBadParams, key, fmt.Sprintf(format, args...))
}

// ErrBadParams is wrapped by drivers when parameters are invalid.
var ErrBadParams = errors.New("batondriver: invalid parameters")

// ErrJobNotFound is returned when a named job does not exist.
var ErrJobNotFound = errors.New("batondriver: job not found")

// ErrKeyNotFound is returned by KeyGet for a concurrency key that is not
// active in the queue: no holders, parked jobs or limit override.
var ErrKeyNotFound = errors.New("batondriver: concurrency key not found")

// The page sizes of the list calls (JobList, KeyList, LockList).
const (
	// MaxPage is the most entries one list call returns.
	MaxPage = 1000
	// DefaultPage is the page size of a list call whose Limit is 0.
	DefaultPage = 100
)

// PageSize checks a list call's Limit (0 to MaxPage) and Offset (not
// negative) and returns its page size: Limit, or DefaultPage for 0. The
// error wraps ErrBadParams.
func PageSize(limit, offset int) (int, error) {
	if limit < 0 || limit > MaxPage || offset < 0 {
		return 0, fmt.Errorf("%w: Limit %d (0 to %d), Offset %d (not negative)", ErrBadParams, limit, MaxPage, offset)
	}
	if limit == 0 {
		return DefaultPage, nil
	}
	return limit, nil
}

package batonlock

import "errors"

var (
	// ErrNotAcquired is returned by TryAcquire when the key has no free slot
	// or earlier callers are waiting for one.
	ErrNotAcquired = errors.New("batonlock: not acquired")

	// ErrNotHeld is returned by Release and Extend when the lease is no
	// longer held: it expired, or was lost while the holder could not
	// reach the backend. It is also the cause of a lease's context when the
	// backend reports the lease gone.
	ErrNotHeld = errors.New("batonlock: lease not held")

	// ErrLeaseExpired is the cause of a lease's context when its validity
	// ran out before a heartbeat or Extend could confirm it.
	ErrLeaseExpired = errors.New("batonlock: lease expired before it could be confirmed")

	// ErrReleased is the cause of a lease's context after Release.
	ErrReleased = errors.New("batonlock: lease released")
)

// Package batonlock provides distributed locks and semaphores that are fair,
// fenced and kept alive by a heartbeat, on any Baton backend (Redis
// standalone, Sentinel or Cluster through batondriver/batonredis; in memory
// through batondriver/batonmem).
//
// A Locker hands out a Lease on a key. A key has a limit of slots (1 is a
// mutex, N a semaphore), stored in the backend and changeable at runtime
// with SetLimit (0 halts the key). Guarantees, on every backend:
//
//   - At most limit unexpired leases per key at any moment.
//   - Waiters are granted in arrival order; TryAcquire never overtakes a
//     waiter. A release grants the freed slot to the next waiter in the same
//     atomic step and wakes only that waiter: waiting costs no polling.
//   - Only the holder's 128-bit random token can extend or release a lease.
//   - Every grant carries a fencing token, strictly increasing per key
//     forever. An idle key keeps nothing (on Redis, after an idle TTL of a
//     minute by default): fences are floored by the Redis server's clock,
//     and in memory come from one counter per driver, so they keep rising
//     without a counter kept per key ever locked. A limit override stays
//     until it is reset.
//   - Expiry is decided by the backend's clock; a holder's view of its lease
//     (Until) is measured on its own monotonic clock from when it sent the
//     request, less a margin, so the holder always gives up first.
//   - A heartbeat extends the lease at a third of its TTL; the lease's
//     Context is cancelled the moment the lease is released, reported lost,
//     or cannot be confirmed before Until.
//
// What a lease cannot do: stop a process that is paused (GC, swap, SIGSTOP)
// from acting after its lease ended, or survive the loss of a Redis master
// whose replica had not yet received the grant. Pass Lease.Fence to the
// systems you write to so they can refuse late writers. docs/locking.md
// explains both limits and what Baton does about them.
//
// Bad input to a call (an empty or too long key, a limit, TTL or page out
// of range) is an error wrapping batondriver.ErrBadParams, which says what
// is wrong; other errors are the backend's.
package batonlock

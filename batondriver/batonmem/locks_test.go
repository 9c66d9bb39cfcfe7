package batonmem

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// lockKeysKept counts the lock keys the driver keeps anything of.
func lockKeysKept(d *Driver) (meta, locks int) {
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		meta += len(sh.meta)
		locks += len(sh.locks)
		sh.mu.Unlock()
	}
	return meta, locks
}

// lockAndRelease takes key (as token "t", limit 1) and releases it,
// requiring both to work, and returns the lease's fence.
func lockAndRelease(t *testing.T, d *Driver, key string) uint64 {
	t.Helper()
	ctx := context.Background()
	r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "t", Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, r.Granted)
	_, err = d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "t", Fence: r.Fence})
	require.NoError(t, err)
	return r.Fence
}

// Lock keys used once and released leave nothing behind, however many: the
// driver does not grow with the keys ever locked. A key with an override
// keeps it, and fences rise across a key's idle spells.
func TestIdleLockKeysForgotten(t *testing.T) {
	d := New()
	ctx := context.Background()
	for i := range 1000 {
		lockAndRelease(t, d, fmt.Sprintf("user:%d", i))
	}
	meta, locks := lockKeysKept(d)
	require.Zero(t, meta)
	require.Zero(t, locks)

	var last uint64
	for range 3 {
		fence := lockAndRelease(t, d, "user:1")
		require.Greater(t, fence, last)
		last = fence
	}

	_, err := d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "tenant", Limit: 3})
	require.NoError(t, err)
	meta, locks = lockKeysKept(d)
	require.Equal(t, 1, meta, "the override")
	require.Zero(t, locks)
	_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "tenant", Reset: true})
	require.NoError(t, err)
	meta, _ = lockKeysKept(d)
	require.Zero(t, meta, "reset: nothing left")
}

// Keys nobody releases — a holder that crashed, a waiter that gave up and
// left its mark — are forgotten once all they hold has expired, by the
// acquires of other keys that come across them.
func TestAbandonedLockKeysForgotten(t *testing.T) {
	d := New()
	ctx := context.Background()
	for i := range 100 {
		key := fmt.Sprintf("crashed:%d", i)
		r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "t", Limit: 1, TTL: 300 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, r.Granted)
		_, err = d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: fmt.Sprintf("gaveup:%d", i), Token: "w", WaitTTL: 300 * time.Millisecond})
		require.NoError(t, err)
	}
	meta, locks := lockKeysKept(d)
	require.Equal(t, 100, meta)
	require.Equal(t, 200, locks)
	time.Sleep(350 * time.Millisecond) // every lease and mark expires
	for i := 0; i < 100_000 && locks > 0; i++ {
		lockAndRelease(t, d, fmt.Sprintf("live:%d", i%1000))
		if i%100 == 99 {
			meta, locks = lockKeysKept(d)
		}
	}
	meta, locks = lockKeysKept(d)
	require.Zero(t, locks)
	require.Zero(t, meta)
}

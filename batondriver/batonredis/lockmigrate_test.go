package batonredis

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// TestLockReleaseDuringSlotMove releases a held lock key with a waiter
// while the key's slot is half moved (IMPORTING on one master, MIGRATING
// on the one that has all five of its keys, none moved yet), and calls the
// move off 300ms later: the release goes through whole, and the waiter is
// granted the slot.
//
// It failed before lock scripts named the key's tag, which never exists:
// the release ran on the source, removed the holder, which emptied and so
// deleted H, then promoted the waiter into H — Redis 7 checks every key a
// script touches against the slot's move, found H missing on a migrating
// slot and aborted the script there ("Script attempted to access a non
// local key in a cluster node script"). The release failed at once, the
// waiter was not granted, and the free slot waited for its next recheck.
func TestLockReleaseDuringSlotMove(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterT(t)
	d := newDriver(t, newClient(t, cluster.Addrs()...))
	ctx := t.Context()
	const key = "moving-lock"
	held, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "holder", Limit: 1, TTL: 30 * time.Second})
	require.NoError(t, err)
	require.True(t, held.Granted)
	waiting, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "waiter", Limit: 1, TTL: 30 * time.Second,
		Wait: true, WaitTTL: 30 * time.Second})
	require.NoError(t, err)
	require.False(t, waiting.Granted)

	k := d.lockKeys(key)
	for _, key := range k.keys[:5] { // H W X I C
		n, err := d.client.Do(ctx, d.client.B().Exists().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "%s: every key of the lock is on the slot's master", key)
	}
	slot, err := cluster.Slot(k.tag)
	require.NoError(t, err)
	callOff := halfMoveSlot(t, cluster, slot)

	// The move is called off 300ms later: a release refused meanwhile is
	// sent again until then.
	released := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "holder", Fence: held.Fence})
		released <- err
	}()
	time.Sleep(300 * time.Millisecond)
	callOff()
	relErr := <-released
	info, err := d.LockInspect(ctx, &batondriver.LockInspectParams{Key: key})
	require.NoError(t, err)
	require.NoError(t, relErr, "the release during the move")
	require.Len(t, info.Holders, 1, "the released slot went to the waiter (holders %v, waiters %v)", info.Holders, info.Waiters)
	require.Equal(t, "waiter", info.Holders[0].Token)
}

package batonredis

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/redistest"
)

// sentinelClient returns a rueidis client that finds its master through
// the Sentinel at addr, closed when the test ends.
func sentinelClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{addr},
		Sentinel:    rueidis.SentinelOption{MasterSet: redistest.MasterSet},
	})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// quietLog discards the heartbeats' warnings of a failover test.
var quietLog = slog.New(slog.DiscardHandler)

// failoverFences records the fences a key was granted, before and after a
// failover.
type failoverFences struct{ before, after []uint64 }

// TestFaultSentinelFailover kills the master of a Sentinel-managed pair
// (master and one replica) while leases are held, and checks what
// docs/locking.md says of a failover with asynchronous replication. The
// replica replicates through a proxy, so that the test decides which
// grants reach it: those made before Synced did, those made during the
// proxy's partition did not (the master acknowledged them and died; the
// proxy drops what it held). Two processes, each with its own client that
// follows the Sentinel by itself, share the keys:
//
//   - "kept", granted and replicated, stays held across the failover: its
//     heartbeat is confirmed by the new master, a waiter queued behind it
//     before the failover is granted it when it is released afterwards;
//   - "lost", granted but not replicated, is granted again on the new
//     master (two holders), and the old holder's context is cancelled
//     within a heartbeat interval of the new grant;
//   - every key's fences after the failover are above all of its fences
//     before it, the unreplicated ones included (the time floor).
func TestFaultSentinelFailover(t *testing.T) {
	t.Parallel()
	// Long enough that the replicated lease outlives the failover (about
	// 1.5s) however its heartbeats fell.
	const ttl = 6 * time.Second
	const heartbeat = ttl / 3 // batonlock's default interval
	master := redistest.StartT(t, nil)
	px := faultproxy.StartT(t, master.Addr())
	replica := redistest.StartT(t, &redistest.Options{ReplicaOf: px.Addr()})
	sentinel := redistest.StartSentinelT(t, master, 1)
	prefix := "t" + randomHex(6)
	// Process A holds; process B contends and waits.
	la, err := batonlock.New(faultDriver(t, sentinelClient(t, sentinel.Addr()), prefix), &batonlock.Config{TTL: ttl, Logger: quietLog})
	require.NoError(t, err)
	lb, err := batonlock.New(faultDriver(t, sentinelClient(t, sentinel.Addr()), prefix), &batonlock.Config{TTL: ttl, Logger: quietLog})
	require.NoError(t, err)
	t.Cleanup(px.Heal) // before the clients close
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fences := map[string]*failoverFences{"kept": {}, "lost": {}, "fences": {}}
	grants := func(l *batonlock.Locker, n int, after bool) {
		for range n {
			ls, err := l.TryAcquire(ctx, "fences", nil)
			require.NoError(t, err)
			require.NoError(t, ls.Release(ctx))
			f := fences["fences"]
			if after {
				f.after = append(f.after, ls.Fence())
			} else {
				f.before = append(f.before, ls.Fence())
			}
		}
	}
	addr, err := sentinel.SentinelMaster()
	require.NoError(t, err)
	require.Equal(t, master.Addr(), addr, "the Sentinel failed the master over before the test did")

	// Replicated: grants of "fences", the lease on "kept" and B's place
	// behind it.
	grants(la, 10, false)
	kept, err := la.TryAcquire(ctx, "kept", nil)
	require.NoError(t, err)
	faultReleaseLater(t, kept)
	keptEnded := faultEnded(kept)
	fences["kept"].before = append(fences["kept"].before, kept.Fence())
	waiter := faultWaiter(t, ctx, lb, "kept", ttl)
	require.NoError(t, replica.Synced())

	// Acknowledged by the master, never replicated: more grants of
	// "fences" and the lease on "lost".
	px.Partition()
	grants(la, 10, false)
	lost, err := la.TryAcquire(ctx, "lost", nil)
	require.NoError(t, err)
	faultReleaseLater(t, lost)
	lostEnded := faultEnded(lost)
	fences["lost"].before = append(fences["lost"].before, lost.Fence())

	require.NoError(t, master.Kill())
	killedAt := time.Now()
	px.Cut() // the held replication stream is lost with the master
	px.Heal()

	// B takes "lost" as soon as its client reaches the new master: it was
	// never granted there. Nobody tells the client of the failover but
	// the Sentinel.
	var taken *batonlock.Lease
	for taken == nil {
		actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
		taken, err = lb.TryAcquire(actx, "lost", nil)
		acancel()
		require.Falsef(t, errors.Is(err, batonlock.ErrNotAcquired), "the unreplicated lease on %q survived the failover", "lost")
		require.Lessf(t, time.Since(killedAt), 15*time.Second, "no grant on the new master 15s after the kill: %v", err)
	}
	takenAt := time.Now()
	faultReleaseLater(t, taken)
	fences["lost"].after = append(fences["lost"].after, taken.Fence())
	addr, err = sentinel.SentinelMaster()
	require.NoError(t, err)
	require.Equal(t, replica.Addr(), addr, "granted, yet the Sentinel names another master")
	t.Logf("B granted %q on the new master %v after the kill", "lost", takenAt.Sub(killedAt))

	// Two holders of "lost": A learns at its next heartbeat that reaches
	// the new master (ErrNotHeld), unless its validity ran out first, had
	// the failover taken most of the TTL (ErrLeaseExpired).
	lostEndedAt := faultEndedAt(t, lostEnded, ttl, "the old holder's lease on the lost grant")
	overlap := lostEndedAt.Sub(takenAt)
	cause := lost.Err()
	t.Logf("A's lease on %q ended %v after B's grant (%v)", "lost", overlap, cause)
	require.Truef(t, errors.Is(cause, batonlock.ErrNotHeld) || errors.Is(cause, batonlock.ErrLeaseExpired), "cause %v", cause)
	require.Lessf(t, overlap, heartbeat+faultTimerSlack, "two holders of %q for longer than a heartbeat interval", "lost")
	require.NoError(t, taken.Err(), "the new holder keeps its lease")
	require.ErrorIs(t, lost.Release(ctx), batonlock.ErrNotHeld, "the old holder's release is refused")

	// "kept" replicated: it survives, confirmed by a heartbeat of the
	// new master, and B still waits for it. Until is a heartbeat's send
	// time plus the TTL less the margin (1% of it plus 2ms): past this, it
	// was sent after the kill, so answered by the new master.
	confirmed := killedAt.Add(ttl - ttl/100 - 2*time.Millisecond)
	require.Eventuallyf(t, func() bool { return kept.Until().After(confirmed) }, 2*heartbeat, 10*time.Millisecond,
		"no heartbeat of the replicated lease confirmed by the new master (Until %v after the kill: %v)", kept.Until().Sub(killedAt), kept.Err())
	t.Logf("the replicated lease on %q confirmed by the new master, Until now %v after the kill", "kept", kept.Until().Sub(killedAt))
	select {
	case at := <-keptEnded:
		require.FailNowf(t, "the replicated lease ended", "%v after the kill: %v", at.Sub(killedAt), kept.Err())
	case r := <-waiter:
		require.FailNowf(t, "the waiter was granted a held lock", "%v %v", r.lease, r.err)
	default:
	}
	info, err := lb.Inspect(ctx, "kept")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, kept.Token(), info.Holders[0].Token)
	require.Equal(t, 1, info.WaiterCount, "B's place survived")
	require.NoError(t, kept.Release(ctx))
	releasedAt := time.Now()
	var r faultAcquired
	select {
	case r = <-waiter:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the waiter queued before the failover was not granted the lock released after it")
	}
	require.NoError(t, r.err)
	faultReleaseLater(t, r.lease)
	fences["kept"].after = append(fences["kept"].after, r.lease.Fence())
	t.Logf("waiter granted %q %v after its release", "kept", r.at.Sub(releasedAt))
	require.NoError(t, r.lease.Release(ctx))
	require.NoError(t, taken.Release(ctx))

	// Fences on the new master are above every fence of the old one,
	// though its counter of "fences" missed the last ten grants.
	grants(la, 10, true)
	grants(lb, 10, true)
	var before, after []uint64
	for key, f := range fences {
		t.Logf("%q fences before the failover %d..%d, after %d..%d",
			key, slices.Min(f.before), slices.Max(f.before), slices.Min(f.after), slices.Max(f.after))
		require.Truef(t, slices.IsSorted(f.before) && slices.IsSorted(f.after), "%q: fences out of order: %v %v", key, f.before, f.after)
		require.Greaterf(t, slices.Min(f.after), slices.Max(f.before), "%q: a fence after the failover is not above every fence before it", key)
		before, after = append(before, f.before...), append(after, f.after...)
	}
	// Across keys too, here: the time floor orders fences of keys granted
	// fewer than 1024 times a millisecond.
	gap := time.Duration(slices.Min(after)-slices.Max(before)) * time.Millisecond / 1024
	t.Logf("the lowest fence after the failover is %v of server time above the highest before it", gap)
	require.Greater(t, slices.Min(after), slices.Max(before))
}

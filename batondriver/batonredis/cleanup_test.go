package batonredis

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/redistest"
)

// Nothing grows without bound: once a key is idle, the only name it leaves in
// Redis is its ":c" hash (fence and arrival counters, limits), which is kept
// forever so that fencing tokens never repeat. Holders, waiters and waiter
// info carry expiries and are deleted by the script that empties them.

// cleanupSetup returns a client on the shared server, a driver with a prefix
// of its own, and a Locker on it.
func cleanupSetup(t *testing.T) (rueidis.Client, *Driver, *batonlock.Locker) {
	t.Helper()
	client := newClient(t, redistest.SharedServer(t).Addr())
	d := newDriver(t, client)
	l, err := batonlock.New(d, nil)
	require.NoError(t, err)
	return client, d, l
}

// idleDriver returns a client of the shared server and a driver on it with
// LockIdleTTL idle.
func idleDriver(t *testing.T, idle time.Duration) (rueidis.Client, *Driver) {
	t.Helper()
	client := newClient(t, redistest.SharedServer(t).Addr())
	d, err := New(client, &Config{Prefix: "t" + randomHex(6), LockIdleTTL: idle})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return client, d
}

// cleanupKeys lists every key under the driver's prefix with SCAN, but the
// index of lock keys, which is no lock's own: LockList prunes idle keys
// from it ("released" checks).
func cleanupKeys(t *testing.T, client rueidis.Client, d *Driver) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	var cursor uint64
	for {
		e, err := client.Do(ctx, client.B().Scan().Cursor(cursor).Match(d.prefix+":*").Count(1000).Build()).AsScanEntry()
		require.NoError(t, err)
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return k == d.locksKey() })
	slices.Sort(keys)
	return slices.Compact(keys)
}

// cleanupWaitGone waits until none of names exists, for at most limit.
func cleanupWaitGone(t *testing.T, client rueidis.Client, limit time.Duration, names ...string) time.Time {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		n, err := client.Do(ctx, client.B().Exists().Key(names...).Build()).AsInt64()
		require.NoError(t, err)
		if n == 0 {
			return time.Now()
		}
		require.Falsef(t, time.Now().After(deadline), "%v still exist after %v", names, limit)
		time.Sleep(10 * time.Millisecond)
	}
}

// cleanupPTTL returns the PTTL of name in milliseconds.
func cleanupPTTL(t *testing.T, client rueidis.Client, name string) int64 {
	t.Helper()
	ms, err := client.Do(context.Background(), client.B().Pttl().Key(name).Build()).AsInt64()
	require.NoError(t, err)
	return ms
}

func TestIdleKeyCleanup(t *testing.T) {
	t.Parallel()

	// A semaphore of 3 is filled, waited on, given up on and released:
	// afterwards only the ":c" hash is left, once the mark of the waiter
	// that gave up has expired after WaitTTL, and it expires too, the idle
	// TTL after the last lease it covered ("idle counters expire" below).
	t.Run("released", func(t *testing.T) {
		t.Parallel()
		client, d, _ := cleanupSetup(t)
		const waitTTL = 300 * time.Millisecond
		l, err := batonlock.New(d, &batonlock.Config{WaitTTL: waitTTL})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		key := "customer:12345"
		opts := &batonlock.AcquireOpts{Limit: 3, TTL: 5 * time.Second}

		var leases []*batonlock.Lease
		for range 3 {
			ls, err := l.TryAcquire(ctx, key, opts)
			require.NoError(t, err)
			leases = append(leases, ls)
		}
		t.Cleanup(func() {
			for _, ls := range leases {
				_ = ls.Release(context.Background())
			}
		})

		// A waiter that will be granted, and one behind it that gives up.
		type result struct {
			lease *batonlock.Lease
			err   error
		}
		first, second := make(chan result, 1), make(chan result, 1)
		firstQueued, secondQueued := make(chan int, 1), make(chan int, 1)
		go func() {
			ls, err := l.Acquire(ctx, key, &batonlock.AcquireOpts{Limit: 3, TTL: 5 * time.Second,
				OnWait: func(p int) { firstQueued <- p }})
			first <- result{ls, err}
		}()
		require.Equal(t, 1, <-firstQueued)
		giveUpCtx, giveUp := context.WithCancel(ctx)
		go func() {
			ls, err := l.Acquire(giveUpCtx, key, &batonlock.AcquireOpts{Limit: 3, TTL: 5 * time.Second,
				OnWait: func(p int) { secondQueued <- p }})
			second <- result{ls, err}
		}()
		require.Equal(t, 2, <-secondQueued)
		giveUp()
		r := <-second
		require.ErrorIs(t, r.err, context.Canceled)

		require.NoError(t, leases[0].Release(ctx))
		r = <-first
		require.NoError(t, r.err)
		leases = append(leases, r.lease)
		for _, ls := range leases[1:] {
			require.NoError(t, ls.Release(ctx))
		}

		lk := d.lockKeys(key).keys
		x, i, c := lk[2], lk[3], lk[4]
		// The waiter that gave up is remembered for WaitTTL, so that a call
		// of its still on the way cannot queue it again: ":x" and ":i" hold
		// that mark alone and expire with it.
		require.Equal(t, []string{c, i, x}, cleanupKeys(t, client, d))
		marks, err := client.Do(ctx, client.B().Hvals().Key(i).Build()).AsStrSlice()
		require.NoError(t, err)
		require.Equal(t, []string{"gone"}, marks)
		n, err := client.Do(ctx, client.B().Zcard().Key(x).Build()).AsInt64()
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		for _, k := range []string{x, i} {
			require.InDelta(t, waitTTL.Milliseconds()/2, cleanupPTTL(t, client, k), float64(waitTTL.Milliseconds()/2), k)
		}
		cleanupWaitGone(t, client, 2*time.Second, x, i)
		require.Equal(t, []string{c}, cleanupKeys(t, client, d))
		pttl := cleanupPTTL(t, client, c)
		require.Positive(t, pttl, "the counters expire")
		require.LessOrEqual(t, pttl, (5*time.Second + defaultLockIdleTTL).Milliseconds(), "a lease and the idle TTL")
		fields, err := client.Do(ctx, client.B().Hgetall().Key(c).Build()).AsStrMap()
		require.NoError(t, err)
		lastFence := strconv.FormatUint(leases[len(leases)-1].Fence(), 10)
		require.Equal(t, lastFence, fields["fence"])
		require.Equal(t, "3", fields["dlimit"])
		require.NotEmpty(t, fields["seq"])
		require.NotEmpty(t, fields["exp"])
		require.Len(t, fields, 4)
		// The idle key stays in the index of lock keys until a listing.
		require.Equal(t, []string{key}, indexed(t, client, d))
		list, err := d.LockList(ctx, &batondriver.LockListParams{})
		require.NoError(t, err)
		require.Empty(t, list.Keys)
		require.Zero(t, list.Total)
		require.Empty(t, indexed(t, client, d))

		// The cost of an idle key, for the docs.
		for _, k := range []string{key, strings.Repeat("k", 64)} {
			if k != key {
				ls, err := l.TryAcquire(ctx, k, nil)
				require.NoError(t, err)
				require.NoError(t, ls.Release(ctx))
			}
			name := d.lockKeys(k).keys[4]
			usage, err := client.Do(ctx, client.B().MemoryUsage().Key(name).Samples(0).Build()).AsInt64()
			require.NoError(t, err)
			enc, err := client.Do(ctx, client.B().ObjectEncoding().Key(name).Build()).ToString()
			require.NoError(t, err)
			t.Logf("idle key %q: MEMORY USAGE %d bytes (%s, name of %d bytes)", name, usage, enc, len(name))
		}
	})

	// With nothing left to cover, ":c" goes the idle TTL after the last
	// lease or place it covered: an idle key keeps nothing. Its fences and
	// its waiters' order do not need it: both are floored by the server
	// clock.
	t.Run("idle counters expire", func(t *testing.T) {
		t.Parallel()
		const idle = 200 * time.Millisecond
		client, d := idleDriver(t, idle)
		ctx := context.Background()
		key := "idle-counters"
		c := d.lockKeys(key).keys[4]
		acquire := func(tok string, wait bool) *batondriver.LockAcquireResult {
			t.Helper()
			r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: tok, Limit: 1,
				TTL: 300 * time.Millisecond, Wait: wait, WaitTTL: 300 * time.Millisecond})
			require.NoError(t, err)
			return r
		}
		release := func(tok string, fence uint64) {
			t.Helper()
			_, err := d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: tok, Fence: fence})
			require.NoError(t, err)
		}
		first := acquire("a", false)
		require.True(t, first.Granted)
		release("a", first.Fence)
		pttl := cleanupPTTL(t, client, c)
		require.Greater(t, pttl, idle.Milliseconds(), "the lease it covered, and the idle TTL")
		require.LessOrEqual(t, pttl, (300*time.Millisecond + idle).Milliseconds())
		gone := cleanupWaitGone(t, client, 2*time.Second, c)
		require.Empty(t, cleanupKeys(t, client, d), "an idle key keeps nothing")
		t.Logf(":c gone %v after the release", time.Until(gone).Abs())

		// Fences keep rising without it.
		second := acquire("b", false)
		require.True(t, second.Granted)
		require.Greater(t, second.Fence, first.Fence)

		// A waiter queued after ":c" went still goes behind one queued
		// before: its arrival number is floored by the server clock.
		// (Named so that a tie of arrival numbers would put the second
		// first: the set orders equal scores by member.)
		w1 := acquire("z-first", true)
		require.Equal(t, 1, w1.Position)
		// The hash is deleted here by hand, as its expiry would: that comes
		// at least half the idle TTL after the last grant it covered, so
		// the clock floor has passed every fence given (the same
		// millisecond would repeat one).
		time.Sleep(5 * time.Millisecond)
		_, err := client.Do(ctx, client.B().Del().Key(c).Build()).AsInt64()
		require.NoError(t, err)
		w2 := acquire("a-second", true)
		require.Equal(t, 2, w2.Position, "behind the waiter queued before the counters went")
		release("b", second.Fence)
		r1 := acquire("z-first", false)
		require.True(t, r1.Granted, "a try by a holder reports its grant")
		info, err := d.LockInspect(ctx, &batondriver.LockInspectParams{Key: key})
		require.NoError(t, err)
		require.Len(t, info.Holders, 1)
		require.Equal(t, "z-first", info.Holders[0].Token, "the first waiter got the slot")
		require.Equal(t, r1.Fence, info.Holders[0].Fence)
		require.Greater(t, info.Holders[0].Fence, second.Fence, "a fence above those before the counters went")
	})

	// A call that neither grants nor queues (a failed try, a late recheck)
	// and finds ":c" gone writes it again, with the caller's default: the
	// hash it makes expires too, instead of staying for good.
	t.Run("recreated counters expire", func(t *testing.T) {
		t.Parallel()
		client, d := idleDriver(t, 300*time.Millisecond)
		ctx := context.Background()
		key := "recreated"
		c := d.lockKeys(key).keys[4]
		held, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "a", Limit: 1, TTL: time.Second})
		require.NoError(t, err)
		require.True(t, held.Granted)
		time.Sleep(5 * time.Millisecond)
		_, err = client.Do(ctx, client.B().Del().Key(c).Build()).AsInt64()
		require.NoError(t, err)
		try, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "b", Limit: 1, TTL: time.Second})
		require.NoError(t, err)
		require.False(t, try.Granted)
		require.Positive(t, cleanupPTTL(t, client, c), "written again, with an expiry")
		// A try on a key nobody holds, with a default of 0, grants nothing
		// and stores its default: that hash expires as well.
		zero, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: "zero", Token: "z", Limit: 0, TTL: time.Second})
		require.NoError(t, err)
		require.False(t, zero.Granted)
		require.Positive(t, cleanupPTTL(t, client, d.lockKeys("zero").keys[4]))
	})

	// A lease extended past the idle TTL keeps ":c" with it: its release
	// uses the default limit stored there to grant waiters.
	t.Run("extended lease keeps counters", func(t *testing.T) {
		t.Parallel()
		client, d := idleDriver(t, 50*time.Millisecond)
		ctx := context.Background()
		key := "extended"
		c := d.lockKeys(key).keys[4]
		// Extended every 200ms: late sleeps under load do not lose it (at
		// 300ms and every 100ms they did, with other suites running).
		const ttl = 600 * time.Millisecond
		r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "a", Limit: 2, TTL: ttl})
		require.NoError(t, err)
		require.True(t, r.Granted)
		for range 5 { // 1s: past the lease and the idle TTL
			time.Sleep(ttl / 3)
			e, err := d.LockExtend(ctx, &batondriver.LockExtendParams{Key: key, Token: "a", Fence: r.Fence, TTL: ttl})
			require.NoError(t, err)
			require.True(t, e.Extended)
		}
		require.Positive(t, cleanupPTTL(t, client, c), "kept past the idle TTL while the lease is extended")
		info, err := d.LockInspect(ctx, &batondriver.LockInspectParams{Key: key})
		require.NoError(t, err)
		require.Equal(t, 2, info.Limit, "the stored default")
	})

	// A key with a limit override keeps ":c", with no expiry, while it has
	// it; once the override is reset the hash expires like any other.
	t.Run("override kept", func(t *testing.T) {
		t.Parallel()
		client, d := idleDriver(t, 300*time.Millisecond)
		ctx := context.Background()
		key := "override-kept"
		c := d.lockKeys(key).keys[4]
		r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "a", Limit: 1, TTL: 100 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, r.Granted)
		require.Positive(t, cleanupPTTL(t, client, c))
		_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: key, Limit: 5})
		require.NoError(t, err)
		require.EqualValues(t, -1, cleanupPTTL(t, client, c), "an override is kept for good")
		_, err = d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "a", Fence: r.Fence})
		require.NoError(t, err)
		r, err = d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "b", Limit: 1, TTL: 100 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, r.Granted)
		require.EqualValues(t, -1, cleanupPTTL(t, client, c), "a lease does not put an expiry on an override")
		_, err = d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "b", Fence: r.Fence})
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond)
		info, err := d.LockInspect(ctx, &batondriver.LockInspectParams{Key: key})
		require.NoError(t, err)
		require.True(t, info.Override)
		require.Equal(t, 5, info.Limit)
		_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: key, Reset: true})
		require.NoError(t, err)
		require.Positive(t, cleanupPTTL(t, client, c), "expiring again once reset")
		cleanupWaitGone(t, client, 2*time.Second, c)
	})

	// A holder that crashes (no heartbeat, no release) leaves no ":h" key:
	// the holders key expires with its last lease.
	t.Run("crashed holder", func(t *testing.T) {
		t.Parallel()
		client, d, l := cleanupSetup(t)
		ctx := context.Background()
		const ttl = 200 * time.Millisecond
		key := "crashed-holder"
		h := d.lockKeys(key).keys[0]

		lease, err := l.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl, NoHeartbeat: true})
		require.NoError(t, err)
		acquired := time.Now()
		pttl := cleanupPTTL(t, client, h)
		require.Greater(t, pttl, int64(0))
		require.LessOrEqual(t, pttl, ttl.Milliseconds())

		// Never released: the lease ends on its own, then the key goes.
		select {
		case <-lease.Done():
		case <-time.After(2 * time.Second):
			require.FailNow(t, "lease without heartbeat did not end")
		}
		require.ErrorIs(t, lease.Err(), batonlock.ErrLeaseExpired)
		gone := cleanupWaitGone(t, client, time.Second, h)
		t.Logf("holders key gone %v after acquire", gone.Sub(acquired))
		require.Equal(t, []string{d.lockKeys(key).keys[4]}, cleanupKeys(t, client, d))
	})

	// A waiter whose process died stops refreshing its place: the next
	// release skips it and grants the waiter behind it, and the waiter keys
	// are emptied and deleted by that release.
	t.Run("dead waiter skipped", func(t *testing.T) {
		t.Parallel()
		client, d, l := cleanupSetup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		key := "dead-waiter-skipped"

		held, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{
			Key: key, Token: "holder", Limit: 1, TTL: 5 * time.Second,
		})
		require.NoError(t, err)
		require.True(t, held.Granted)
		dead, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{
			Key: key, Token: "dead", Limit: 1, TTL: 5 * time.Second, Wait: true, WaitTTL: 200 * time.Millisecond,
		})
		require.NoError(t, err)
		require.Equal(t, 1, dead.Position)

		queued := make(chan int, 1)
		type result struct {
			lease *batonlock.Lease
			err   error
		}
		live := make(chan result, 1)
		go func() {
			ls, err := l.Acquire(ctx, key, &batonlock.AcquireOpts{TTL: 5 * time.Second, OnWait: func(p int) { queued <- p }})
			live <- result{ls, err}
		}()
		require.Equal(t, 2, <-queued, "the live waiter queues behind the dead one")

		// Once the dead waiter's place has expired it is no longer listed.
		deadline := time.Now().Add(2 * time.Second)
		for {
			info, err := l.Inspect(ctx, key)
			require.NoError(t, err)
			if info.WaiterCount == 1 {
				require.NotEqual(t, "dead", info.Waiters[0].Token)
				break
			}
			require.False(t, time.Now().After(deadline), "the dead waiter's place did not expire")
			time.Sleep(20 * time.Millisecond)
		}

		rel, err := d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "holder", Fence: held.Fence})
		require.NoError(t, err)
		require.Equal(t, &batondriver.LockReleaseResult{Released: true, Promoted: 1}, rel)
		var r result
		select {
		case r = <-live:
		case <-time.After(5 * time.Second):
			require.FailNow(t, "the live waiter was not granted")
		}
		require.NoError(t, r.err)
		t.Cleanup(func() { _ = r.lease.Release(context.Background()) })
		info, err := l.Inspect(ctx, key)
		require.NoError(t, err)
		require.Len(t, info.Holders, 1)
		require.Equal(t, r.lease.Token(), info.Holders[0].Token)
		require.Equal(t, r.lease.Fence(), info.Holders[0].Fence)
		require.Zero(t, info.WaiterCount)

		// The release that promoted the live waiter reaped the dead one:
		// the waiter keys are empty, so they are gone already.
		k := d.lockKeys(key)
		require.Equal(t, cleanupSorted(k.keys[0], k.keys[4]), cleanupKeys(t, client, d))
		require.NoError(t, r.lease.Release(ctx))
		require.Equal(t, []string{k.keys[4]}, cleanupKeys(t, client, d))
	})

	// With nobody left to touch the key, a dead waiter's keys expire after
	// WaitTTL, and a crashed holder's after its TTL.
	t.Run("dead waiter expires", func(t *testing.T) {
		t.Parallel()
		client, d, _ := cleanupSetup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		key := "dead-waiter-expires"
		// The holder's TTL leaves the second call room to come while it
		// still holds, on a loaded machine too (at 400ms, it once did not).
		const waitTTL, ttl = 200 * time.Millisecond, 2 * time.Second
		k := d.lockKeys(key)
		h, w, x, i, c := k.keys[0], k.keys[1], k.keys[2], k.keys[3], k.keys[4]

		start := time.Now()
		held, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{
			Key: key, Token: "crashed", Limit: 1, TTL: ttl,
		})
		require.NoError(t, err)
		require.True(t, held.Granted)
		dead, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{
			Key: key, Token: "dead", Limit: 1, TTL: time.Second, Wait: true, WaitTTL: waitTTL,
		})
		require.NoError(t, err)
		require.Equal(t, 1, dead.Position)
		require.Equal(t, cleanupSorted(h, w, x, i, c), cleanupKeys(t, client, d))
		for _, name := range []string{w, x, i} {
			pttl := cleanupPTTL(t, client, name)
			require.Greater(t, pttl, int64(0), name)
			require.LessOrEqual(t, pttl, waitTTL.Milliseconds(), name)
		}

		waitersGone := cleanupWaitGone(t, client, 2*time.Second, w, x, i)
		holdersGone := cleanupWaitGone(t, client, 4*time.Second, h)
		t.Logf("waiter keys gone %v, holders key gone %v after start", waitersGone.Sub(start), holdersGone.Sub(start))
		require.Equal(t, []string{c}, cleanupKeys(t, client, d))
	})
}

func cleanupSorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestRecheckOfExpiredGrantCleanup: a recheck that finds its grant ran out
// unheard removes it, leaving the holders key empty, and is granted anew:
// the holders key it writes again expires with the new lease.
func TestRecheckOfExpiredGrantCleanup(t *testing.T) {
	t.Parallel()
	client, d, _ := cleanupSetup(t)
	ctx := context.Background()
	const key = "expired-grant"
	h := d.lockKeys(key).keys[0]
	try := func(tok string) *batondriver.LockAcquireResult {
		res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: tok, Limit: 2, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.True(t, res.Granted)
		return res
	}
	a, b := try("a"), try("b")
	p := &batondriver.LockAcquireParams{Key: key, Token: "w", Limit: 2, TTL: 50 * time.Millisecond, Wait: true, WaitTTL: 10 * time.Second}
	res, err := d.LockAcquire(ctx, p)
	require.NoError(t, err)
	require.Equal(t, 1, res.Position)
	for tok, fence := range map[string]uint64{"b": b.Fence, "a": a.Fence} {
		_, err := d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: tok, Fence: fence})
		require.NoError(t, err)
	}
	time.Sleep(100 * time.Millisecond)
	p.Recheck, p.TTL = true, 5*time.Second
	res, err = d.LockAcquire(ctx, p)
	require.NoError(t, err)
	require.True(t, res.Granted)
	pttl := cleanupPTTL(t, client, h)
	require.Positive(t, pttl, "the holders key has no expiry")
	require.LessOrEqual(t, pttl, int64(5000))
}

// TestReapedHoldersKeyExpires: a grant that first reaps the expired holder
// standing in its way, emptying the holders key (and so deleting it), writes
// that key anew with the new lease's expiry. The key outlived the holder
// because the holder's last extension shortened its lease.
func TestReapedHoldersKeyExpires(t *testing.T) {
	t.Parallel()
	client, d, _ := cleanupSetup(t)
	ctx := context.Background()
	const key = "left-to-expire"
	h := d.lockKeys(key).keys[0]
	try := func(tok string) *batondriver.LockAcquireResult {
		t.Helper()
		res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: tok, Limit: 1, TTL: 10 * time.Second})
		require.NoError(t, err)
		require.True(t, res.Granted, tok)
		return res
	}
	a := try("a")
	ext, err := d.LockExtend(ctx, &batondriver.LockExtendParams{Key: key, Token: "a", Fence: a.Fence, TTL: 50 * time.Millisecond})
	require.NoError(t, err)
	require.True(t, ext.Extended)
	time.Sleep(100 * time.Millisecond) // a's lease runs out; it never releases
	try("b")
	pttl := cleanupPTTL(t, client, h)
	require.Positive(t, pttl, "the holders key has no expiry")
	require.LessOrEqual(t, pttl, int64(10000))
}

package batondrivertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// listFixture is one test's driver for LockList, which lists every key of
// the driver's namespace: each test takes a driver of its own.
type listFixture struct {
	t    *testing.T
	d    batondriver.LockDriver
	ctx  context.Context
	base string // the start of every key of the test
}

func newListFixture(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) *listFixture {
	t.Parallel()
	return &listFixture{t: t, d: newDriver(t), ctx: context.Background(), base: uniqueKey(t) + "\xff/"}
}

// key is the test's key named name: odd bytes (braces, %, |, a byte that is
// not UTF-8) before it, and byte order is name order.
func (f *listFixture) key(name string) string { return f.base + name }

// hold grants a slot of key (limit 1) for TTL ttl and returns the fence.
func (f *listFixture) hold(key string, ttl time.Duration) (string, uint64) {
	f.t.Helper()
	tok := token()
	res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{Key: key, Token: tok, Limit: 1, TTL: ttl})
	require.NoError(f.t, err)
	require.True(f.t, res.Granted, "slot of %q not granted", key)
	return tok, res.Fence
}

// used locks key once and releases it: the key is idle, and known.
func (f *listFixture) used(key string) {
	f.t.Helper()
	tok, fence := f.hold(key, 10*time.Second)
	res, err := f.d.LockRelease(f.ctx, &batondriver.LockReleaseParams{Key: key, Token: tok, Fence: fence})
	require.NoError(f.t, err)
	require.True(f.t, res.Released)
}

func (f *listFixture) list(limit, offset int) *batondriver.LockListResult {
	f.t.Helper()
	res, err := f.d.LockList(f.ctx, &batondriver.LockListParams{Limit: limit, Offset: offset})
	require.NoError(f.t, err)
	require.NotNil(f.t, res.Keys)
	return res
}

// all walks every page of limit keys and returns the keys and the last
// Total.
func (f *listFixture) all(limit int) ([]string, int) {
	f.t.Helper()
	var keys []string
	for offset, pages := 0, 0; ; pages++ {
		require.Less(f.t, pages, 100, "the listing does not end")
		res := f.list(limit, offset)
		if limit > 0 {
			require.LessOrEqual(f.t, len(res.Keys), limit)
		}
		for _, k := range res.Keys {
			keys = append(keys, k.Key)
		}
		offset += len(res.Keys)
		if offset >= res.Total {
			return keys, res.Total
		}
	}
}

func names(infos []*batondriver.LockInfo) []string {
	out := []string{}
	for _, k := range infos {
		out = append(out, k.Key)
	}
	return out
}

func exerciseLockList(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) {
	t.Run("EmptyAtFirst", func(t *testing.T) {
		f := newListFixture(t, newDriver)
		require.Equal(t, &batondriver.LockListResult{Keys: []*batondriver.LockInfo{}}, f.list(0, 0))
	})

	t.Run("ListsKeysInUse", func(t *testing.T) {
		f := newListFixture(t, newDriver)
		held, waited, halted := f.key("a-held"), f.key("b-waited"), f.key("c-halted")
		tok, fence := f.hold(held, 10*time.Second)
		owner, _ := f.hold(waited, 10*time.Second)
		waiter := token()
		res, err := f.d.LockAcquire(f.ctx, &batondriver.LockAcquireParams{
			Key: waited, Token: waiter, Limit: 1, TTL: time.Second, Wait: true, WaitTTL: 10 * time.Second,
		})
		require.NoError(t, err)
		require.Equal(t, 1, res.Position)
		// A limit set for a key nobody has locked lists it: it is halted.
		_, err = f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Key: halted, Limit: 0})
		require.NoError(t, err)
		// Idle keys are not listed: released, expired, or a reset limit.
		f.used(f.key("d-released"))
		f.hold(f.key("e-expired"), 30*time.Millisecond)
		reset := f.key("f-reset")
		_, err = f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Key: reset, Limit: 3})
		require.NoError(t, err)
		_, err = f.d.LockSetLimit(f.ctx, &batondriver.LockSetLimitParams{Key: reset, Reset: true})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			info, err := f.d.LockInspect(f.ctx, &batondriver.LockInspectParams{Key: f.key("e-expired")})
			return err == nil && len(info.Holders) == 0
		}, 3*time.Second, 10*time.Millisecond)

		for range 2 { // a listing that pruned lists the same again
			got := f.list(0, 0)
			require.Equal(t, []string{held, waited, halted}, names(got.Keys))
			require.Equal(t, 3, got.Total)
			a, b, c := got.Keys[0], got.Keys[1], got.Keys[2]
			require.Equal(t, []string{tok}, tokens(a.Holders))
			require.Equal(t, fence, a.LastFence)
			require.Equal(t, 1, a.Limit)
			require.False(t, a.Override)
			require.Equal(t, []string{owner}, tokens(b.Holders))
			require.Equal(t, []string{waiter}, waiterTokens(b.Waiters))
			require.Equal(t, 1, b.WaiterCount)
			require.Empty(t, c.Holders)
			require.Zero(t, c.WaiterCount)
			require.True(t, c.Override)
			require.Zero(t, c.Limit)
		}
	})

	t.Run("Pages", func(t *testing.T) {
		f := newListFixture(t, newDriver)
		var want []string
		for i := range 5 {
			want = append(want, f.key(fmt.Sprint(i)))
			f.hold(want[i], 10*time.Second)
		}
		for offset, page := range [][]string{want[0:2], want[2:4], want[4:5], {}} {
			got := f.list(2, 2*offset)
			require.Equal(t, page, names(got.Keys), "offset %d", 2*offset)
			require.Equal(t, 5, got.Total)
		}
		require.Empty(t, f.list(2, 1<<40).Keys)
		require.Equal(t, want[1:], names(f.list(1000, 1).Keys))
		for _, p := range []*batondriver.LockListParams{{Limit: -1}, {Limit: 1001}, {Offset: -1}} {
			_, err := f.d.LockList(f.ctx, p)
			require.ErrorIs(t, err, batondriver.ErrBadParams, "%+v", p)
		}
	})

	// Idle keys between keys in use neither show nor make a later page skip
	// a key: the next page starts at Offset plus the keys returned.
	t.Run("PagesSkipIdleKeys", func(t *testing.T) {
		f := newListFixture(t, newDriver)
		var want []string
		for i := range 9 {
			k := f.key(fmt.Sprint(i))
			if i%3 == 1 {
				f.used(k)
				continue
			}
			want = append(want, k)
			f.hold(k, 10*time.Second)
		}
		for _, limit := range []int{1, 2, 4, 0} {
			got, total := f.all(limit)
			require.Equal(t, want, got, "limit %d", limit)
			require.Equal(t, len(want), total, "limit %d", limit)
		}
	})

	t.Run("OwnNamespaceOnly", func(t *testing.T) {
		f := newListFixture(t, newDriver)
		other := newDriver(t)
		key := f.key("mine")
		f.hold(key, 10*time.Second)
		require.Equal(t, []string{key}, names(f.list(0, 0).Keys))
		res, err := other.LockList(f.ctx, &batondriver.LockListParams{})
		require.NoError(t, err)
		require.Empty(t, res.Keys, "another driver's keys are listed")
		require.Zero(t, res.Total)
	})
}

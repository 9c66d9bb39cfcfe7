package batonlock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
)

func TestList(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, d batondriver.LockDriver) {
		l := newLocker(t, d, nil)
		ctx := context.Background()
		keys, total, err := l.List(ctx, nil)
		require.NoError(t, err)
		require.Empty(t, keys)
		require.Zero(t, total)

		held, err := l.TryAcquire(ctx, "b:held", &batonlock.AcquireOpts{Limit: 2})
		require.NoError(t, err)
		t.Cleanup(func() { _ = held.Release(context.Background()) })
		require.NoError(t, l.SetLimit(ctx, "a:halted", 0))
		done, err := l.TryAcquire(ctx, "c:done", nil)
		require.NoError(t, err)
		require.NoError(t, done.Release(ctx))

		keys, total, err = l.List(ctx, nil)
		require.NoError(t, err)
		require.Equal(t, 2, total)
		require.Len(t, keys, 2)
		require.Equal(t, &batonlock.Info{Key: "a:halted", Override: true}, keys[0])
		require.Equal(t, "b:held", keys[1].Key)
		require.Equal(t, 2, keys[1].Limit)
		require.Equal(t, held.Fence(), keys[1].LastFence)
		require.Len(t, keys[1].Holders, 1)
		require.Equal(t, held.Token(), keys[1].Holders[0].Token)
		require.Positive(t, keys[1].Holders[0].TTL)

		keys, total, err = l.List(ctx, &batonlock.ListOpts{Limit: 1, Offset: 1})
		require.NoError(t, err)
		require.Equal(t, 2, total)
		require.Len(t, keys, 1)
		require.Equal(t, "b:held", keys[0].Key)

		for _, o := range []*batonlock.ListOpts{{Limit: -1}, {Limit: 1001}, {Offset: -1}} {
			_, _, err := l.List(ctx, o)
			require.ErrorContains(t, err, "out of range", "%+v", o)
		}
	})
}

// shortPages is a backend whose listing returns one key a call, as the
// Redis backend may while it prunes a long run of idle keys.
type shortPages struct {
	batondriver.LockDriver
	calls int
}

func (d *shortPages) LockList(ctx context.Context, p *batondriver.LockListParams) (*batondriver.LockListResult, error) {
	d.calls++
	res, err := d.LockDriver.LockList(ctx, p)
	if err == nil && len(res.Keys) > 1 {
		res.Keys = res.Keys[:1]
	}
	return res, err
}

// List fills its page from a backend that returns short ones.
func TestListFillsShortPages(t *testing.T) {
	t.Parallel()
	d := &shortPages{LockDriver: batonmem.New()}
	l := newLocker(t, d, nil)
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c", "d"} {
		require.NoError(t, l.SetLimit(ctx, k, 1))
	}
	keys, total, err := l.List(ctx, &batonlock.ListOpts{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 4, total)
	require.Equal(t, []string{"a", "b", "c"}, []string{keys[0].Key, keys[1].Key, keys[2].Key})
	require.Len(t, keys, 3)
	require.Equal(t, 3, d.calls)
	keys, _, err = l.List(ctx, &batonlock.ListOpts{Limit: 3, Offset: 3})
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, 4, d.calls, "the listing ended: no call more")
}

// The keys in use, a page at a time: those with holders or waiters, or a
// limit set at runtime. Idle keys are not listed.
func ExampleLocker_List() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx := context.Background()
	a, _ := locker.TryAcquire(ctx, "sync:user:1", nil)
	b, _ := locker.TryAcquire(ctx, "sync:user:2", &batonlock.AcquireOpts{Limit: 3})
	_ = b.Release(ctx) // idle again
	_ = locker.SetLimit(ctx, "webhooks:customer:42", 0)

	for offset := 0; ; {
		keys, total, err := locker.List(ctx, &batonlock.ListOpts{Limit: 100, Offset: offset})
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, k := range keys {
			fmt.Printf("%s: limit %d (override %v), %d holding, %d waiting\n",
				k.Key, k.Limit, k.Override, len(k.Holders), k.WaiterCount)
		}
		if offset += len(keys); offset >= total {
			break
		}
	}
	_ = a.Release(ctx)
	// Output:
	// sync:user:1: limit 1 (override false), 1 holding, 0 waiting
	// webhooks:customer:42: limit 0 (override true), 0 holding, 0 waiting
}

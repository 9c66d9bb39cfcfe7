package main

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/redistest"
)

func testLocksList(t *testing.T, bin string) {
	f := setup(t, bin)
	ctx := context.Background()
	r := f.run("locks", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no lock keys in use\n", r.stdout)
	var out lockListOut
	f.runJSON(&out, "locks", "list")
	require.Equal(t, lockListOut{Keys: []*lockOut{}}, out)

	locker, err := batonlock.New(f.driver, nil)
	require.NoError(t, err)
	acquire := func(key string, opts *batonlock.AcquireOpts) *batonlock.Lease {
		lease, err := locker.TryAcquire(ctx, key, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = lease.Release(context.Background()) })
		return lease
	}
	held := acquire("a:held", nil)
	// A waiter behind the holder, whose place outlives the test.
	_, err = f.driver.LockAcquire(ctx, &batondriver.LockAcquireParams{
		Key: "a:held", Token: "waiter", Limit: 1, TTL: time.Minute, Wait: true, WaitTTL: time.Minute,
	})
	require.NoError(t, err)
	require.NoError(t, locker.SetLimit(ctx, "b:halted", 0))
	require.NoError(t, acquire("c:idle", nil).Release(ctx))
	acquire("d:sem", &batonlock.AcquireOpts{Limit: 3})
	require.NoError(t, locker.SetLimit(ctx, "d:sem", 5))
	odd := acquire("e:\xff\tx", nil)

	r = f.run("locks", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 6, r.stdout)
	require.Equal(t, []string{"HOLDERS", "WAITING", "LIMIT", "LAST", "FENCE", "KEY"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"1", "1", "1", fenceOf(held), "a:held"}, strings.Fields(lines[1]))
	require.Equal(t, []string{"0", "0", "halted", "-", "b:halted"}, strings.Fields(lines[2]))
	require.Equal(t, []string{"1", "0", "5", "(override)"}, strings.Fields(lines[3])[:4])
	require.Equal(t, "d:sem", strings.Fields(lines[3])[5])
	require.Equal(t, []string{"1", "0", "1", fenceOf(odd), `"e:\xff\tx"`}, strings.Fields(lines[4]), "an odd key is quoted")
	require.Equal(t, "(4 lock keys in use)", lines[5])
	require.NotContains(t, r.stdout, held.Token(), "tables show no tokens")

	f.runJSON(&out, "locks", "list")
	require.Equal(t, 4, out.Total)
	require.Len(t, out.Keys, 4)
	a := out.Keys[0]
	require.Equal(t, "a:held", a.Key)
	require.Empty(t, a.KeyBase64)
	require.Equal(t, held.Fence(), a.LastFence)
	require.Len(t, a.Holders, 1)
	require.Equal(t, held.Token(), a.Holders[0].Token)
	require.Equal(t, []waiterOut{{Token: "waiter", TTLMillis: a.Waiters[0].TTLMillis}}, a.Waiters)
	require.Equal(t, 1, a.WaiterCount)
	require.True(t, out.Keys[1].Override)
	require.Zero(t, out.Keys[1].Limit)
	raw, err := base64.StdEncoding.DecodeString(out.Keys[3].KeyBase64)
	require.NoError(t, err)
	require.Equal(t, "e:\xff\tx", string(raw), "a key that is not UTF-8 comes in base64 too")

	// A page at a time, or all at once.
	r = f.run("locks", "list", "--limit", "2")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "(1-2 of 4 lock keys; --offset 2 for more)")
	f.runJSON(&out, "locks", "list", "--limit", "2", "--offset", "3")
	require.Equal(t, 4, out.Total)
	require.Equal(t, 3, out.Offset)
	require.Len(t, out.Keys, 1)
	require.Equal(t, out.Keys[0].KeyBase64, base64.StdEncoding.EncodeToString(raw))
	r = f.run("locks", "list", "--offset", "9")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no lock keys in use past the first 9 (4 in all)\n", r.stdout)
	f.runJSON(&out, "locks", "list", "--all")
	require.Len(t, out.Keys, 4)
	r = f.run("locks", "list", "--all")
	require.Contains(t, r.stdout, "(4 lock keys in use)")

	for _, args := range [][]string{
		{"--all", "--limit", "2"}, {"--all", "--offset", "1"}, {"--limit", "0"}, {"--limit", "1001"}, {"--offset", "-1"}, {"extra"},
	} {
		r = f.run(append([]string{"locks", "list"}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stdout)
	}

	// A released key leaves the listing.
	require.NoError(t, held.Release(ctx))
	_, err = f.driver.LockRelease(ctx, &batondriver.LockReleaseParams{Key: "a:held", Token: "waiter"})
	require.NoError(t, err)
	f.runJSON(&out, "locks", "list")
	require.Len(t, out.Keys, 3)
	require.Equal(t, "b:halted", out.Keys[0].Key)

	// On a Cluster: every key's state from its own node.
	addrs := redistest.SharedCluster(t).Addrs()
	cf := newFixture(t, bin, "redis://"+strings.Join(addrs, ","), addrs...)
	clocker, err := batonlock.New(cf.driver, nil)
	require.NoError(t, err)
	var want []string
	for _, k := range []string{"k:1", "k:2", "k:3", "k:4", "k:5"} {
		lease, err := clocker.TryAcquire(ctx, k, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = lease.Release(context.Background()) })
		want = append(want, k)
	}
	cf.runJSON(&out, "locks", "list", "--all")
	var got []string
	for _, k := range out.Keys {
		got = append(got, k.Key)
		require.Len(t, k.Holders, 1, k.Key)
	}
	require.Equal(t, want, got)
}

func fenceOf(l *batonlock.Lease) string { return strconv.FormatUint(l.Fence(), 10) }

package batonredis

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// indexSetup returns a client on server addr and a driver whose memory of
// the index runs on a fake clock.
func indexSetup(t *testing.T, addr string) (rueidis.Client, *Driver, *fakeClock) {
	t.Helper()
	client := newClient(t, addr)
	d := newDriver(t, client)
	clock := &fakeClock{now: time.Now()}
	d.locksSeen.now = clock.Now
	return client, d, clock
}

// indexed returns the keys in the driver's index, in order.
func indexed(t *testing.T, client rueidis.Client, d *Driver) []string {
	t.Helper()
	keys, err := client.Do(t.Context(), client.B().Zrange().Key(d.locksKey()).Min("0").Max("-1").Build()).AsStrSlice()
	require.NoError(t, err)
	return keys
}

func dropIndex(t *testing.T, client rueidis.Client, d *Driver) {
	t.Helper()
	require.NoError(t, client.Do(t.Context(), client.B().Del().Key(d.locksKey()).Build()).Error())
}

// indexWrites is a client that counts the commands that write the index
// of lock keys.
type indexWrites struct {
	rueidis.Client
	key string
	mu  sync.Mutex
	n   int
}

func (c *indexWrites) count(cmd *rueidis.Completed) {
	if args := cmd.Commands(); len(args) > 1 && args[0] == "ZADD" && args[1] == c.key {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
}

func (c *indexWrites) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.count(&cmd)
	return c.Client.Do(ctx, cmd)
}

func (c *indexWrites) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	for i := range cmds {
		c.count(&cmds[i])
	}
	return c.Client.DoMulti(ctx, cmds...)
}

func (c *indexWrites) writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// commandCalls returns how many times the server ran cmd (INFO
// commandstats).
func commandCalls(t *testing.T, client rueidis.Client, cmd string) int {
	t.Helper()
	info, err := client.Do(t.Context(), client.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_"+cmd+":calls="); ok {
			n := 0
			for _, c := range rest {
				if c < '0' || c > '9' {
					break
				}
				n = n*10 + int(c-'0')
			}
			return n
		}
	}
	return 0
}

func acquireRelease(t *testing.T, d *Driver, key string) {
	t.Helper()
	ctx := t.Context()
	tok := randomHex(8)
	res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: tok, Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, res.Granted)
	rel, err := d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: tok, Fence: res.Fence})
	require.NoError(t, err)
	require.True(t, rel.Released)
}

// An instance adds a key to the index with its first use, in the same
// round trip, and not again for a period; on a server that has not seen the
// script yet, the pipelined EVALSHA falls back to EVAL.
func TestLockIndexOncePerPeriod(t *testing.T) {
	t.Parallel()
	client, d, clock := indexSetup(t, redistest.StartT(t, nil).Addr())
	counter := &indexWrites{Client: client, key: d.locksKey()}
	d.client = counter
	for range 20 {
		acquireRelease(t, d, "k{1}")
	}
	require.Equal(t, 1, counter.writes(), "the key was added more than once")
	require.Equal(t, 2, commandCalls(t, client, "eval"), "acquire.lua and release.lua not loaded once each")
	require.Equal(t, []string{"k{1}"}, indexed(t, client, d))

	// Lost from the index, the key is not added again within the period...
	dropIndex(t, client, d)
	clock.Add(lockIndexPeriod - time.Millisecond)
	acquireRelease(t, d, "k{1}")
	require.Empty(t, indexed(t, client, d))
	// ...but at its first use after at most two periods.
	clock.Add(lockIndexPeriod + time.Millisecond)
	acquireRelease(t, d, "k{1}")
	require.Equal(t, []string{"k{1}"}, indexed(t, client, d))
	require.Equal(t, 2, counter.writes())
}

// A heartbeat keeps a key that is held for long in the index; a limit set
// for a key adds it every time.
func TestLockIndexExtendAndSetLimit(t *testing.T) {
	t.Parallel()
	client, d, clock := indexSetup(t, redistest.SharedServer(t).Addr())
	ctx := t.Context()
	res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: "leader", Token: "t", Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	dropIndex(t, client, d)
	clock.Add(2 * lockIndexPeriod)
	ext, err := d.LockExtend(ctx, &batondriver.LockExtendParams{Key: "leader", Token: "t", Fence: res.Fence, TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, ext.Extended)
	require.Equal(t, []string{"leader"}, indexed(t, client, d))

	_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "halted", Limit: 0})
	require.NoError(t, err)
	dropIndex(t, client, d)
	_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "halted", Limit: 0})
	require.NoError(t, err)
	require.Equal(t, []string{"halted"}, indexed(t, client, d))
	_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "reset", Reset: true})
	require.NoError(t, err)
	require.Equal(t, []string{"halted"}, indexed(t, client, d), "a reset limit adds nothing")
}

// LockList prunes the idle keys it meets. A key locked again after that is
// listed again: at once through another instance, and through the same
// instance at its first use after its memory of the key lapsed.
func TestLockListPrunes(t *testing.T) {
	t.Parallel()
	client, d, clock := indexSetup(t, redistest.SharedServer(t).Addr())
	ctx := t.Context()
	for _, k := range []string{"a", "b", "c"} {
		acquireRelease(t, d, k)
	}
	res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: "d", Token: "t", Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "c", "d"}, indexed(t, client, d))

	list, err := d.LockList(ctx, &batondriver.LockListParams{Limit: 1})
	require.NoError(t, err)
	require.Len(t, list.Keys, 1)
	require.Equal(t, "d", list.Keys[0].Key)
	require.Equal(t, res.Fence, list.Keys[0].LastFence)
	require.Equal(t, 1, list.Total)
	require.Equal(t, []string{"d"}, indexed(t, client, d))

	// The same instance remembers adding "a": not listed yet.
	acquire := func(d *Driver, key string) {
		r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: randomHex(8), Limit: 2, TTL: time.Minute})
		require.NoError(t, err)
		require.True(t, r.Granted)
	}
	acquire(d, "a")
	require.Equal(t, []string{"d"}, indexed(t, client, d))
	clock.Add(2 * lockIndexPeriod)
	acquire(d, "a")
	require.Equal(t, []string{"a", "d"}, indexed(t, client, d))

	// Another instance (process) adds "b" with its first use.
	other, err := New(client, &Config{Prefix: d.prefix})
	require.NoError(t, err)
	t.Cleanup(other.Close)
	acquire(other, "b")
	require.Equal(t, []string{"a", "b", "d"}, indexed(t, client, d))
}

// The index is best-effort: a failed index write does not fail the lock
// transition, and is tried again at the next one.
func TestLockIndexBestEffort(t *testing.T) {
	t.Parallel()
	client, d, _ := indexSetup(t, redistest.SharedServer(t).Addr())
	ctx := t.Context()
	require.NoError(t, client.Do(ctx, client.B().Set().Key(d.locksKey()).Value("not a sorted set").Build()).Error())
	acquireRelease(t, d, "k")
	_, err := d.LockList(ctx, &batondriver.LockListParams{})
	require.ErrorContains(t, err, "WRONGTYPE", "a listing reports a broken index")
	dropIndex(t, client, d)
	acquireRelease(t, d, "k")
	require.Equal(t, []string{"k"}, indexed(t, client, d))
}

// With NoLockIndex an instance never writes the index.
func TestNoLockIndex(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedServer(t).Addr())
	d, err := New(client, &Config{Prefix: "t" + randomHex(6), NoLockIndex: true})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := t.Context()
	res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: "k", Token: "t", Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.True(t, res.Granted)
	_, err = d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "k", Limit: 2})
	require.NoError(t, err)
	require.Empty(t, indexed(t, client, d))
	list, err := d.LockList(ctx, &batondriver.LockListParams{})
	require.NoError(t, err)
	require.Empty(t, list.Keys)
}

// A listing on a server that has not seen the inspect script loads it.
func TestLockListNoScript(t *testing.T) {
	t.Parallel()
	client, d, _ := indexSetup(t, redistest.StartT(t, nil).Addr())
	ctx := t.Context()
	_, err := d.LockSetLimit(ctx, &batondriver.LockSetLimitParams{Key: "k", Limit: 2})
	require.NoError(t, err)
	for range 2 {
		list, err := d.LockList(ctx, &batondriver.LockListParams{})
		require.NoError(t, err)
		require.Len(t, list.Keys, 1)
		require.True(t, list.Keys[0].Override)
		require.Equal(t, 2, list.Keys[0].Limit)
	}
	require.Equal(t, 1, commandCalls(t, client, "script|load"), "the inspect script was not loaded once")
}

// An index full of idle keys gives short pages while a listing prunes it,
// and the listing still ends with every key in use, once.
func TestLockListBoundedWork(t *testing.T) {
	t.Parallel()
	client, d, _ := indexSetup(t, redistest.SharedServer(t).Addr())
	ctx := t.Context()
	members := make([]string, 2500)
	for i := range members {
		members[i] = "idle-" + itoa(10000+i)
	}
	add := client.B().Zadd().Key(d.locksKey()).ScoreMember()
	for _, m := range members {
		add = add.ScoreMember(0, m)
	}
	require.NoError(t, client.Do(ctx, add.Build()).Error())
	for _, k := range []string{"idle-10500-held", "idle-12499-held", "zz-held"} {
		_, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: k, Token: "t", Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
	}
	var got []string
	offset, calls := 0, 0
	for {
		calls++
		res, err := d.LockList(ctx, &batondriver.LockListParams{Limit: 1, Offset: offset})
		require.NoError(t, err)
		for _, k := range res.Keys {
			got = append(got, k.Key)
		}
		offset += len(res.Keys)
		if offset >= res.Total {
			break
		}
	}
	require.Equal(t, []string{"idle-10500-held", "idle-12499-held", "zz-held"}, got)
	require.Equal(t, got, indexed(t, client, d), "idle keys left in the index")
	// At most 1000 entries a call: the first finds the held key at entry
	// 502, the second only idle keys, the third the next held key at its
	// 1000th entry, the fourth the last one.
	require.Equal(t, 4, calls)
}

func TestRecentKeys(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{now: time.Now()}
	r := &recentKeys{period: time.Second, now: clock.Now}
	require.False(t, r.has("a"))
	r.add("a")
	clock.Add(999 * time.Millisecond)
	require.True(t, r.has("a"))
	clock.Add(time.Millisecond) // a new generation; "a" in the old one
	require.True(t, r.has("a"))
	r.add("b")
	clock.Add(time.Second) // "a" forgotten, "b" old
	require.False(t, r.has("a"))
	require.True(t, r.has("b"))
	clock.Add(2 * time.Second) // both forgotten at once
	require.False(t, r.has("b"))
	require.Empty(t, r.cur)
	require.Empty(t, r.old)
}

// Keys locked once and released leave the index without a listing: every
// few keys new to the index, the instance looks at a batch of it in the
// background and removes the keys that have nothing left in Redis (their
// ":c" expired, the idle TTL after their last lease), but never a key in
// use.
func TestLockIndexPrunedInBackground(t *testing.T) {
	t.Parallel()
	client, d := idleDriver(t, 50*time.Millisecond)
	d.prune.every, d.prune.batch = 10, 30
	ctx := t.Context()
	lockOnce := func(key string) {
		t.Helper()
		res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "t", Limit: 1, TTL: 100 * time.Millisecond})
		require.NoError(t, err)
		require.True(t, res.Granted)
		_, err = d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "t", Fence: res.Fence})
		require.NoError(t, err)
	}
	held := map[string]uint64{}
	for i := range 5 {
		key := fmt.Sprintf("held:%d", i)
		res, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "t", Limit: 1, TTL: time.Minute})
		require.NoError(t, err)
		require.True(t, res.Granted)
		held[key] = res.Fence
	}
	for i := range 300 {
		lockOnce(fmt.Sprintf("early:%03d", i))
	}
	time.Sleep(300 * time.Millisecond) // their ":c" hashes expire
	earlyLeft := func(keys []string) int {
		n := 0
		for _, k := range keys {
			if strings.HasPrefix(k, "early:") {
				n++
			}
		}
		return n
	}
	// New keys start prunes of 30 entries every 10 (none while one runs):
	// a few hundred go round the index of up to 605 entries.
	for i := 0; i < 3000 && earlyLeft(indexed(t, client, d)) > 0; i += 50 {
		for j := range 50 {
			lockOnce(fmt.Sprintf("late:%04d", i+j))
		}
		require.Eventually(t, func() bool { return !d.prune.running.Load() }, 5*time.Second, time.Millisecond)
	}
	keys := indexed(t, client, d)
	require.Zero(t, earlyLeft(keys), "the keys with nothing left were pruned")
	for key := range held {
		require.Contains(t, keys, key, "a key in use stays")
	}
	for key, fence := range held {
		_, err := d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "t", Fence: fence})
		require.NoError(t, err)
	}
}

// BenchmarkFreshKeys locks and releases a key never used before, each
// iteration, as per-user locks over many users do: the case the index and
// its background prune cost the most. It reports the server calls per key
// (INFO stats total_commands_processed, the calls inside scripts included)
// with the index on and its prune every 1,000 new keys, with the index on
// and no prune, and with the index off.
//
//	go test -run '^$' -bench FreshKeys -benchtime 20000x ./batondriver/batonredis/
func BenchmarkFreshKeys(b *testing.B) {
	client := newClient(b, redistest.StartT(b, nil).Addr())
	ctx := b.Context()
	processed := func() int64 {
		info, err := client.Do(ctx, client.B().Info().Section("stats").Build()).ToString()
		require.NoError(b, err)
		for _, line := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(b, err)
				return n
			}
		}
		b.Fatal("no total_commands_processed")
		return 0
	}
	for _, c := range []struct {
		name           string
		noIndex, prune bool
	}{{"index+prune", false, true}, {"index", false, false}, {"no-index", true, false}} {
		b.Run(c.name, func(b *testing.B) {
			d, err := New(client, &Config{Prefix: "b" + randomHex(6), NoLockIndex: c.noIndex})
			require.NoError(b, err)
			defer d.Close()
			if !c.prune {
				d.prune.every = math.MaxInt64
			}
			before := processed()
			b.ResetTimer()
			for i := range b.N {
				key := fmt.Sprintf("user:%d", i)
				r, err := d.LockAcquire(ctx, &batondriver.LockAcquireParams{Key: key, Token: "t", Limit: 1, TTL: time.Minute})
				require.NoError(b, err)
				_, err = d.LockRelease(ctx, &batondriver.LockReleaseParams{Key: key, Token: "t", Fence: r.Fence})
				require.NoError(b, err)
			}
			b.StopTimer()
			require.Eventually(b, func() bool { return !d.prune.running.Load() }, 10*time.Second, time.Millisecond)
			b.ReportMetric(float64(processed()-before-1)/float64(b.N), "server-calls/key")
		})
	}
}

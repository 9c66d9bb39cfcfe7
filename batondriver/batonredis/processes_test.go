package batonredis

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// beatProcess records process id on d for ttl.
func beatProcess(t *testing.T, d *Driver, id string, ttl time.Duration) {
	t.Helper()
	_, err := d.ProcessBeat(jobCtx(t), &batondriver.ProcessBeatParams{
		ProcessRecord: batondriver.ProcessRecord{ID: id, Host: "h", PID: 1, Concurrency: 1,
			Queues: []batondriver.ProcessQueue{{Name: "default", Weight: 1}}},
		TTL: ttl,
	})
	require.NoError(t, err)
}

// The registry's two keys live under one hash tag, and nothing outlives
// the records: the keys expire with the latest one, and vanish with the
// last one removed.
func TestProcessKeys(t *testing.T) {
	t.Parallel()
	client, d, _ := jobSetup(t)
	ctx := jobCtx(t)
	keys := d.processKeys()
	require.Equal(t, []string{d.prefix + ":{processes}:expiry", d.prefix + ":{processes}:records"}, keys)
	exists := func() int64 {
		n, err := client.Do(ctx, client.B().Exists().Key(keys...).Build()).AsInt64()
		require.NoError(t, err)
		return n
	}

	beatProcess(t, d, "a", time.Hour)
	beatProcess(t, d, "b", 2*time.Hour)
	beatProcess(t, d, "a", time.Hour) // a renewal keeps the later expiry
	for _, k := range keys {
		require.InDelta(t, (2 * time.Hour).Milliseconds(), cleanupPTTL(t, client, k), 1000, "%s expires with its latest record", k)
	}
	typ, err := client.Do(ctx, client.B().Type().Key(keys[0]).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "zset", typ)
	typ, err = client.Do(ctx, client.B().Type().Key(keys[1]).Build()).ToString()
	require.NoError(t, err)
	require.Equal(t, "hash", typ)

	for _, id := range []string{"a", "b"} {
		require.NoError(t, d.ProcessRemove(ctx, &batondriver.ProcessRemoveParams{ID: id}))
	}
	require.Zero(t, exists(), "the last removal leaves no key")

	// Processes that stop beating without removing their records (killed)
	// leave keys that expire on their own, listed or not.
	beatProcess(t, d, "a", 50*time.Millisecond)
	beatProcess(t, d, "b", 80*time.Millisecond)
	require.Equal(t, int64(2), exists())
	require.Eventually(t, func() bool { return exists() == 0 }, 5*time.Second, 10*time.Millisecond)
}

// A beat drops up to 100 expired records of other processes, so that the
// registry does not keep every crashed process while nobody lists it; a
// listing drops them all.
func TestProcessBeatDropsExpired(t *testing.T) {
	t.Parallel()
	client, d, _ := jobSetup(t)
	ctx := jobCtx(t)
	keys := d.processKeys()
	count := func() (int64, int64) {
		z, err := client.Do(ctx, client.B().Zcard().Key(keys[0]).Build()).AsInt64()
		require.NoError(t, err)
		h, err := client.Do(ctx, client.B().Hlen().Key(keys[1]).Build()).AsInt64()
		require.NoError(t, err)
		return z, h
	}
	beatProcess(t, d, "live", time.Hour)
	for i := range 150 {
		beatProcess(t, d, fmt.Sprint("dead", i), time.Hour)
	}
	// Then expired long ago, as if their processes had been killed: set
	// here, since every beat drops expired records.
	for i := range 150 {
		require.NoError(t, client.Do(ctx, client.B().Zadd().Key(keys[0]).Xx().ScoreMember().ScoreMember(1, fmt.Sprint("dead", i)).Build()).Error())
	}
	z, h := count()
	require.Equal(t, int64(151), z)
	require.Equal(t, int64(151), h)
	beatProcess(t, d, "live", time.Hour)
	z, h = count()
	require.Equal(t, int64(51), z, "a beat drops 100")
	require.Equal(t, int64(51), h)
	res, err := d.ProcessList(ctx)
	require.NoError(t, err)
	require.Len(t, res.Processes, 1)
	z, h = count()
	require.Equal(t, int64(1), z, "a listing drops them all")
	require.Equal(t, int64(1), h)
}

// A record that does not decode is an error that names it, not a silent
// gap in the list.
func TestProcessListBadRecord(t *testing.T) {
	t.Parallel()
	client, d, _ := jobSetup(t)
	ctx := jobCtx(t)
	beatProcess(t, d, "p", time.Hour)
	require.NoError(t, client.Do(ctx, client.B().Hset().Key(d.processKeys()[1]).FieldValue().FieldValue("p", "1|2|{nope").Build()).Error())
	_, err := d.ProcessList(ctx)
	require.ErrorContains(t, err, `process "p"`)
}

package batonredis

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// The schedules hash holds one JSON record per schedule and expires with
// its latest record, so that nothing outlives the registrations.
func TestScheduleKeyExpires(t *testing.T) {
	t.Parallel()
	c, d, q := jobSetup(t)
	ctx := jobCtx(t)
	key := d.queueKeys(q).withSchedules()[numQueueKeys]
	require.Equal(t, d.prefix+":queue:{"+q+"}:schedules", key)
	register := func(name string, ttl time.Duration) {
		t.Helper()
		require.NoError(t, d.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
			Queue: q, Name: name, Spec: "every 1m0s", Kind: "sync", TTL: ttl,
		}))
	}
	pttl := func() time.Duration {
		t.Helper()
		n, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
		require.NoError(t, err)
		return time.Duration(n) * time.Millisecond
	}

	register("long", time.Hour)
	raw, err := c.Do(ctx, c.B().Hget().Key(key).Field("long").Build()).ToString()
	require.NoError(t, err)
	var rec scheduleRecord
	require.NoError(t, json.Unmarshal([]byte(raw), &rec), raw)
	require.Equal(t, "every 1m0s", rec.Spec)
	require.Equal(t, "sync", rec.Kind)
	require.Equal(t, rec.Registered, rec.Seen)
	require.InDelta(t, time.Hour, pttl(), float64(time.Second))

	register("short", 100*time.Millisecond)
	require.InDelta(t, time.Hour, pttl(), float64(time.Second), "the hash lives as long as its latest record")

	// A record that does not decode is dropped.
	require.NoError(t, c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("junk", "{").Build()).Error())
	res, err := d.QueueScheduleList(ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.Len(t, res.Schedules, 2)
	exists, err := c.Do(ctx, c.B().Hexists().Key(key).Field("junk").Build()).AsBool()
	require.NoError(t, err)
	require.False(t, exists)

	// Alone, a short registration takes the hash with it.
	_, d2, q2 := jobSetup(t)
	key2 := d2.queueKeys(q2).withSchedules()[numQueueKeys]
	require.NoError(t, d2.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{Queue: q2, Name: "s", TTL: 50 * time.Millisecond}))
	require.Eventually(t, func() bool {
		n, err := c.Do(ctx, c.B().Exists().Key(key2).Build()).AsInt64()
		return err == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond)
}

// The schedule transitions work as scripts too, on a server without
// functions.
func TestScheduleScriptsWithoutFunctions(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	ctx := jobCtx(t)
	d.scripts = newScripts(luaJobLib)
	d.scripts.jobLib.useEval.Store(true)
	require.NoError(t, d.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
		Queue: q, Name: "s", Spec: "@hourly", Kind: "report", TTL: time.Hour,
	}))
	tick := time.UnixMilli(time.Now().UnixMilli())
	_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{
		Queue: q, Jobs: []*batondriver.JobInsert{{Kind: "report", Args: []byte(`{}`), MaxAttempts: 1}},
		Once: &batondriver.JobInsertOnce{Name: "s", Tick: tick},
	})
	require.NoError(t, err)
	res, err := d.QueueScheduleList(ctx, &batondriver.QueueParams{Queue: q})
	require.NoError(t, err)
	require.Len(t, res.Schedules, 1)
	require.Equal(t, "@hourly", res.Schedules[0].Spec)
	require.Equal(t, "report", res.Schedules[0].Kind)
	require.True(t, tick.Equal(res.Schedules[0].LastTick))
}

package batonredis

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// claimField returns the field of the unique hash that holds the claim of
// u's key in the class of its scope (lua/joblib.lua, "Uniqueness claims").
func claimField(u *batondriver.JobUnique) string {
	class := map[batondriver.UniqueScope]string{batondriver.UniqueQueued: "q", batondriver.UniqueRunning: "r",
		batondriver.UniqueUntilDone: "d", batondriver.UniquePeriod: "p"}[u.Scope]
	return class + ":" + u.Key
}

// uniqueJob returns a job unique under u with scope, rejected on conflict.
func uniqueJob(u string, scope batondriver.UniqueScope) *batondriver.JobInsert {
	j := newJob("k", 0)
	j.Unique = &batondriver.JobUnique{Key: u, Scope: scope, OnConflict: batondriver.UniqueReject}
	if scope == batondriver.UniquePeriod {
		j.Unique.Period = time.Hour
	}
	return j
}

// insertStatus inserts j into queue and returns its status and reason.
func insertStatus(t *testing.T, d *Driver, queue string, j *batondriver.JobInsert) (batondriver.JobInsertStatus, string) {
	t.Helper()
	res, err := d.JobInsert(jobCtx(t), &batondriver.JobInsertParams{Queue: queue, Jobs: []*batondriver.JobInsert{j}})
	require.NoError(t, err)
	return res.Status[0], res.Reason[0]
}

// TestUniqueClaimOfEarlierVersion: a claim stored by a version before
// claims had classes (in the unique key's bare field) holds against an
// insert while its job is in its scope's states, and is ignored after.
func TestUniqueClaimOfEarlierVersion(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	ctx := jobCtx(t)
	u := d.queueKeys(q).keys[keyUnique]
	a := insertJobs(t, d, q, uniqueJob("u", batondriver.UniqueUntilDone))[0]
	// As the earlier version stored it.
	require.NoError(t, client.Do(ctx, client.B().Hdel().Key(u).Field("d:u").Build()).Error())
	require.NoError(t, client.Do(ctx, client.B().Hset().Key(u).FieldValue().FieldValue("u", "0:"+a.ID).Build()).Error())

	for _, scope := range []batondriver.UniqueScope{batondriver.UniqueQueued, batondriver.UniqueUntilDone, batondriver.UniquePeriod} {
		st, reason := insertStatus(t, d, q, uniqueJob("u", scope))
		require.Equal(t, batondriver.JobRejected, st, "scope %s", scope)
		require.Equal(t, "duplicate of "+a.ID, reason, "scope %s", scope)
	}
	st, _ := insertStatus(t, d, q, uniqueJob("u", batondriver.UniqueRunning))
	require.Equal(t, batondriver.JobInserted, st, "a queued job conflicts with no running-scope insert")

	// Once the job has left its scope's states, the claim is ignored.
	got := fetchJobs(t, d, q, 1, time.Minute).Jobs
	require.Equal(t, []string{a.ID}, ids(got))
	_, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q, Retention: time.Hour, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: a.ID, Lease: got[0].Lease}, Outcome: batondriver.JobOutcomeCompleted}}})
	require.NoError(t, err)
	st, _ = insertStatus(t, d, q, uniqueJob("u", batondriver.UniqueUntilDone))
	require.Equal(t, batondriver.JobInserted, st)
}

// TestUniqueFieldsDoNotMix: the field of one unique key's claim in a class
// is never read as the claim of the unique key spelled like it.
func TestUniqueFieldsDoNotMix(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	ctx := jobCtx(t)
	x := insertJobs(t, d, q, uniqueJob("x", batondriver.UniqueQueued))[0]
	fields, err := client.Do(ctx, client.B().Hkeys().Key(d.queueKeys(q).keys[keyUnique]).Build()).AsStrSlice()
	require.NoError(t, err)
	require.Equal(t, []string{"q:x"}, fields)
	st, reason := insertStatus(t, d, q, uniqueJob("q:x", batondriver.UniqueQueued))
	require.Equal(t, batondriver.JobInserted, st, "the claim of x conflicted with an insert of q:x (%s)", reason)
	st, reason = insertStatus(t, d, q, uniqueJob("x", batondriver.UniqueQueued))
	require.Equal(t, batondriver.JobRejected, st)
	require.Equal(t, "duplicate of "+x.ID, reason)
}

// TestUniquePeriodFieldsDoNotMix: the period claim of a unique key, whose
// field is spelled like the bare field of a key p:..., is not read as an
// earlier version's claim of that key while its job says whose it is.
func TestUniquePeriodFieldsDoNotMix(t *testing.T) {
	t.Parallel()
	_, d, q := jobSetup(t)
	x := insertJobs(t, d, q, uniqueJob("x", batondriver.UniquePeriod))[0]
	st, reason := insertStatus(t, d, q, uniqueJob("p:x", batondriver.UniquePeriod))
	require.Equal(t, batondriver.JobInserted, st, "the period claim of x conflicted with an insert of p:x (%s)", reason)
	st, reason = insertStatus(t, d, q, uniqueJob("x", batondriver.UniquePeriod))
	require.Equal(t, batondriver.JobRejected, st)
	require.Equal(t, "duplicate of "+x.ID, reason)
}

// TestUniquePeriodClaimOfEarlierVersion: a period claim stored in the bare
// field, without when it was made, holds while it lasts and is swept by a
// fetch once it lapses.
func TestUniquePeriodClaimOfEarlierVersion(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	ctx := jobCtx(t)
	keys := d.queueKeys(q).keys
	expiry := time.Now().Add(200 * time.Millisecond).UnixMilli()
	claim := rueidis.Commands{
		client.B().Hset().Key(keys[keyUnique]).FieldValue().FieldValue("u", strconv.FormatInt(expiry, 10)+":gone").Build(),
		client.B().Zadd().Key(keys[keyUniquePeriods]).ScoreMember().ScoreMember(float64(expiry), "u").Build(),
	}
	for _, r := range client.DoMulti(ctx, claim...) {
		require.NoError(t, r.Error())
	}
	st, reason := insertStatus(t, d, q, uniqueJob("u", batondriver.UniquePeriod))
	require.Equal(t, batondriver.JobRejected, st)
	require.Equal(t, "duplicate of gone", reason)
	require.Eventually(t, func() bool {
		fetchJobs(t, d, q, 0, time.Minute)
		n, err := client.Do(ctx, client.B().Hexists().Key(keys[keyUnique]).Field("u").Build()).AsBool()
		require.NoError(t, err)
		return !n
	}, 5*time.Second, 20*time.Millisecond, "the lapsed claim swept")
	st, _ = insertStatus(t, d, q, uniqueJob("u", batondriver.UniquePeriod))
	require.Equal(t, batondriver.JobInserted, st)
}

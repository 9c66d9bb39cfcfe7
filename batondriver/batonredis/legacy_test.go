package batonredis

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// toLegacy rewrites queue's available jobs as the versions before the
// available lists kept them: one sorted set, "P:queue:{Q}:available",
// scored priority × 2^42 + an arrival number counted in meta's seq. It
// returns the IDs in fetch order.
func toLegacy(t *testing.T, client rueidis.Client, d *Driver, queue string) []string {
	t.Helper()
	ctx := t.Context()
	k := d.queueKeys(queue)
	legacy := k.keys[keyAvailable][:len(k.keys[keyAvailable])-1]
	var order []string
	var seq int64
	for p := range batondriver.MaxPriority + 1 {
		list := k.keys[keyAvailable] + strconv.Itoa(p)
		ids, err := client.Do(ctx, client.B().Lrange().Key(list).Start(0).Stop(-1).Build()).AsStrSlice()
		require.NoError(t, err)
		for _, id := range ids {
			seq++
			score := float64(int64(p)<<42 + seq)
			require.NoError(t, client.Do(ctx, client.B().Zadd().Key(legacy).ScoreMember().ScoreMember(score, id).Build()).Error())
		}
		order = append(order, ids...)
		require.NoError(t, client.Do(ctx, client.B().Del().Key(list).Build()).Error())
		require.NoError(t, client.Do(ctx, client.B().Hdel().Key(k.keys[keyMeta]).Field("a"+strconv.Itoa(p)).Build()).Error())
	}
	require.NoError(t, client.Do(ctx, client.B().Hset().Key(k.keys[keyMeta]).FieldValue().FieldValue("seq", strconv.FormatInt(seq, 10)).Build()).Error())
	return order
}

// Jobs that an older version left available, in its sorted set, are
// fetched after an upgrade, in their order, behind the jobs this version
// made available before the first fetch; two fetches move them (1,000 a
// fetch), and the set and meta's seq are gone afterwards.
func TestLegacyAvailableSetIsFetched(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	var jobs []*batondriver.JobInsert
	for i := range 1200 {
		jobs = append(jobs, newJob("k", []int{0, 4, 9}[i%3]))
	}
	insertJobs(t, d, q, jobs...)
	legacy := toLegacy(t, client, d, q)
	require.Len(t, legacy, 1200)
	newer := insertJobs(t, d, q, newJob("k", 4), newJob("k", 0))

	var got []string
	for len(got) < 1202 {
		res := fetchJobs(t, d, q, 100, time.Minute)
		require.NotEmpty(t, res.Jobs, "fetched %d of 1202", len(got))
		got = append(got, ids(res.Jobs)...)
	}
	require.Empty(t, fetchJobs(t, d, q, 100, time.Minute).Jobs)

	// The first fetch moved the first 1,000 (the 400 of priority 0 and
	// 400 of priority 4 among them) behind the newer jobs of their
	// priorities; the second the rest.
	want := []string{newer[1].ID}
	want = append(want, legacy[:400]...)
	want = append(want, newer[0].ID)
	want = append(want, legacy[400:1200]...)
	require.Equal(t, want, got)

	k := d.queueKeys(q)
	n, err := client.Do(t.Context(), client.B().Exists().Key(k.keys[keyAvailable][:len(k.keys[keyAvailable])-1]).Build()).AsInt64()
	require.NoError(t, err)
	require.Zero(t, n, "the legacy set is left")
	seq, err := client.Do(t.Context(), client.B().Hexists().Key(k.keys[keyMeta]).Field("seq").Build()).AsBool()
	require.NoError(t, err)
	require.False(t, seq, "meta's seq is left")
}

// A lowered limit demotes the key's available holders that an older
// version left in its sorted set too, as it does those in the lists: the
// key runs no more jobs than its new limit.
func TestLegacyAvailableHoldersDemoted(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	keyed := func(p int) *batondriver.JobInsert {
		j := newJob("k", p)
		j.Key, j.Limit = "k", 3
		return j
	}
	rows := insertJobs(t, d, q, keyed(0), keyed(5), keyed(0))
	toLegacy(t, client, d, q)
	info, err := d.KeySetLimit(jobCtx(t), &batondriver.KeySetLimitParams{Queue: q, Key: "k", Limit: 1})
	require.NoError(t, err)
	require.Equal(t, 1, info.Holding, "legacy holders over the limit stay")
	require.Equal(t, 2, info.Parked)
	res := fetchJobs(t, d, q, 10, time.Minute)
	require.Equal(t, []string{rows[0].ID}, ids(res.Jobs), "the least urgent, then the newest, demoted")
}

// JobDelete of an available job that an older version left in its sorted
// set takes it out of the set: no fetch later pops its ID for nothing.
func TestLegacyAvailableJobDeleted(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	rows := insertJobs(t, d, q, newJob("k", 0), newJob("k", 0))
	toLegacy(t, client, d, q)
	require.NoError(t, d.JobDelete(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[0].ID}))
	res := fetchJobs(t, d, q, 1, time.Minute)
	require.Equal(t, []string{rows[1].ID}, ids(res.Jobs), "the deleted job took the fetch's place")
	require.False(t, res.More)
}

// A fetch of more jobs than a migration's batch moves at least as many:
// it gives out no less urgent job ahead of legacy ones, and reports that
// more are available while the set holds any.
func TestLegacyAvailableSetBigFetch(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	var jobs []*batondriver.JobInsert
	for range 1500 {
		jobs = append(jobs, newJob("k", 0))
	}
	insertJobs(t, d, q, jobs...)
	legacy := toLegacy(t, client, d, q)
	late := insertJobs(t, d, q, newJob("k", 9))
	// No deadline: no fetch of none goes first (see JobFetch).
	res, err := d.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: q, Max: 1200, LeaseTTL: time.Minute})
	require.NoError(t, err)
	got := ids(res.Jobs)
	require.False(t, slices.Contains(got, late[0].ID), "a less urgent job went ahead of legacy ones")
	require.Len(t, got, 1200)
	require.True(t, slices.Equal(legacy[:1200], got), "not the first 1,200 legacy jobs in order")
	require.True(t, res.More, "300 legacy jobs and one more are left")
	res, err = d.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: q, Max: 1200, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.True(t, slices.Equal(append(legacy[1200:], late[0].ID), ids(res.Jobs)), "not the rest in order")
}

// A fetch of a migration's batch of jobs or more moves one more than it
// leases, so that it reports More while the set holds jobs even with the
// lists empty behind them.
func TestLegacyAvailableSetBatchFetchReportsMore(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	var jobs []*batondriver.JobInsert
	for range 1001 {
		jobs = append(jobs, newJob("k", 0))
	}
	insertJobs(t, d, q, jobs...)
	legacy := toLegacy(t, client, d, q)
	// No deadline: no fetch of none goes first (see JobFetch) to move
	// 1,000 jobs of its own.
	fetch := func() *batondriver.JobFetchResult {
		res, err := d.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: q, Max: 1000, LeaseTTL: time.Minute})
		require.NoError(t, err)
		return res
	}
	res := fetch()
	require.True(t, slices.Equal(legacy[:1000], ids(res.Jobs)), "not the first 1,000 legacy jobs in order")
	require.True(t, res.More, "a legacy job is left")
	res = fetch()
	require.Equal(t, legacy[1000:], ids(res.Jobs))
	require.False(t, res.More)
}

// A lowered limit demotes a key's legacy holders before its listed ones of
// the same priority: a fetch moves the legacy jobs behind the listed ones,
// so they are the latest admitted.
func TestLegacyAvailableHoldersDemotedBeforeListed(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	keyed := func() *batondriver.JobInsert {
		j := newJob("k", 0)
		j.Key, j.Limit = "k", 4
		return j
	}
	old := insertJobs(t, d, q, keyed())
	toLegacy(t, client, d, q)
	listed := insertJobs(t, d, q, keyed(), keyed(), keyed())
	info, err := d.KeySetLimit(jobCtx(t), &batondriver.KeySetLimitParams{Queue: q, Key: "k", Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 3, info.Holding)
	require.Equal(t, 1, info.Parked)
	job, err := d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: old[0].ID})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobStateParked, job.State, "the legacy holder, fetched last, demoted")
	require.Equal(t, ids(listed), ids(fetchJobs(t, d, q, 10, time.Minute).Jobs))
}

// listAvailable returns every available job of queue by JobList, a page
// of limit at a time, and checks each page's Total against the whole.
func listAvailable(t *testing.T, d *Driver, queue string, limit int) []string {
	t.Helper()
	var got []string
	total := -1
	for {
		res, err := d.JobList(jobCtx(t), &batondriver.JobListParams{Queue: queue, State: batondriver.JobStateAvailable, Offset: len(got), Limit: limit})
		require.NoError(t, err)
		if total < 0 {
			total = res.Total
		}
		require.Equal(t, total, res.Total, "Total changed between pages")
		if len(res.Jobs) == 0 {
			break
		}
		got = append(got, ids(res.Jobs)...)
	}
	require.Len(t, got, total, "Total is not the jobs listed")
	return got
}

// QueueStats counts the available jobs that an older version left in its
// sorted set before any fetch moved them, and OldestAvailable looks at the
// first job of each priority as a fetch would give them out: a legacy one
// where its priority's list is empty. A fetch that moves them changes
// neither.
func TestLegacyAvailableCounted(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	insertJobs(t, d, q, newJob("k", 0), newJob("k", 4), newJob("k", 4))
	legacy := toLegacy(t, client, d, q)
	insertJobs(t, d, q, newJob("k", 4), newJob("k", 2))
	k := d.queueKeys(q)
	now := time.Now().Truncate(time.Millisecond)
	runAt := func(id string, at time.Time) {
		require.NoError(t, client.Do(t.Context(), client.B().Hset().Key(k.job(id)).FieldValue().
			FieldValue("run_at", strconv.FormatInt(at.UnixMilli(), 10)).Build()).Error())
	}
	// The first of priority 0, in the set; the first in the set of
	// priority 4 waits behind a listed job, so it is not at the front.
	runAt(legacy[0], now.Add(-time.Hour))
	runAt(legacy[1], now.Add(-2*time.Hour))

	check := func(when string) {
		t.Helper()
		st, err := d.QueueStats(jobCtx(t), &batondriver.QueueParams{Queue: q})
		require.NoError(t, err)
		require.Equal(t, 5, st.Counts[batondriver.JobStateAvailable], when)
		require.Equal(t, now.Add(-time.Hour).UnixMilli(), st.OldestAvailable.UnixMilli(), when)
	}
	check("before a fetch")
	// A fetch of none (no deadline: nothing goes first) moves them.
	_, err := d.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: q, Max: 0, LeaseTTL: time.Minute})
	require.NoError(t, err)
	seq, err := client.Do(t.Context(), client.B().Hexists().Key(k.keys[keyMeta]).Field("seq").Build()).AsBool()
	require.NoError(t, err)
	require.False(t, seq, "the fetch did not move the legacy jobs")
	check("after a fetch moved them")
}

// JobList of available jobs lists those an older version left in its
// sorted set where a fetch gives them out: after the listed jobs of their
// priority. At every step of a sequence of fetches, the list is the order
// in which the fetches that follow lease the jobs, while the set holds
// jobs and after they all moved.
func TestLegacyAvailableListedInFetchOrder(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	var jobs []*batondriver.JobInsert
	for i := range 1500 {
		jobs = append(jobs, newJob("k", []int{0, 4, 9, 4}[i%4]))
	}
	insertJobs(t, d, q, jobs...)
	require.Len(t, toLegacy(t, client, d, q), 1500)
	insertJobs(t, d, q, newJob("k", 4), newJob("k", 0), newJob("k", 2), newJob("k", 9))

	var lists [][]string
	var fetched []string
	// Odd sizes, so that fetches end inside priorities, with the set still
	// holding jobs after the first (a migration moves 1,000).
	sizes := []int{7, 300, 1, 250, 500, 999}
	for i := 0; ; i++ {
		lists = append(lists, listAvailable(t, d, q, 1000))
		// No deadline: no fetch of none goes first (see JobFetch).
		res, err := d.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: q, Max: sizes[i%len(sizes)], LeaseTTL: time.Minute})
		require.NoError(t, err)
		if len(res.Jobs) == 0 {
			break
		}
		fetched = append(fetched, ids(res.Jobs)...)
	}
	require.Len(t, fetched, 1504)
	require.Len(t, lists[0], 1504, "JobList before any fetch")
	done := 0
	for i, list := range lists {
		require.True(t, slices.Equal(fetched[done:], list), "JobList before fetch %d is not the order the fetches leased", i+1)
		if i < len(lists)-1 {
			done += len(lists[i]) - len(lists[i+1])
		}
	}
}

// JobList pages through the jobs of the lists and of an older version's
// sorted set in fetch order, whatever the Offset and Limit: pages end and
// begin inside and at the ends of a priority's listed jobs and of its
// legacy ones, and cross priorities with jobs of one kind only.
func TestLegacyAvailableListPages(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	insertJobs(t, d, q, newJob("k", 5), newJob("k", 0), newJob("k", 9), newJob("k", 5), newJob("k", 0), newJob("k", 5))
	legacy := toLegacy(t, client, d, q) // 0 0 5 5 5 9
	listed := ids(insertJobs(t, d, q, newJob("k", 9), newJob("k", 3), newJob("k", 0), newJob("k", 3), newJob("k", 9)))
	want := []string{listed[2]}                          // priority 0: listed,
	want = append(want, legacy[:2]...)                   // then legacy;
	want = append(want, listed[1], listed[3])            // 3: listed only;
	want = append(want, legacy[2:5]...)                  // 5: legacy only;
	want = append(want, listed[0], listed[4], legacy[5]) // 9: both.
	n := len(want)
	for offset := 0; offset <= n+1; offset++ {
		for limit := 1; limit <= n+1; limit++ {
			res, err := d.JobList(jobCtx(t), &batondriver.JobListParams{Queue: q, State: batondriver.JobStateAvailable, Offset: offset, Limit: limit})
			require.NoError(t, err)
			require.Equal(t, n, res.Total, "offset %d limit %d", offset, limit)
			require.Equal(t, want[min(offset, n):min(offset+limit, n)], ids(res.Jobs), "offset %d limit %d", offset, limit)
		}
	}
	require.Equal(t, want, listAvailable(t, d, q, 0), "the default page")
}

// Resuming a queue wakes a waiting fetcher per available job, counting
// those an older version left in its sorted set: a queue holding only
// such jobs is not left to the poll.
func TestLegacyAvailableWokenOnResume(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	insertJobs(t, d, q, newJob("k", 0), newJob("k", 3))
	toLegacy(t, client, d, q)
	k := d.queueKeys(q)
	require.NoError(t, client.Do(t.Context(), client.B().Del().Key(k.keys[keyWake]).Build()).Error()) // the inserts' tokens
	require.NoError(t, d.QueuePause(jobCtx(t), &batondriver.QueuePauseParams{Queue: q}))
	require.NoError(t, d.QueuePause(jobCtx(t), &batondriver.QueuePauseParams{Queue: q, Resume: true}))
	n, err := client.Do(t.Context(), client.B().Llen().Key(k.keys[keyWake]).Build()).AsInt64()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "wake tokens left by the resume")
}

// A period claim stored by a version before claims said when they were
// made reads "expiry:id": not knowing when it was made, a period insert
// conflicts with it while it lasts, however short the insert's own period.
func TestLegacyPeriodClaimConflictsWhileItLasts(t *testing.T) {
	t.Parallel()
	client, d, q := jobSetup(t)
	j := newJob("throttled", 1)
	j.Unique = &batondriver.JobUnique{Key: "u", Scope: batondriver.UniquePeriod, Period: time.Hour}
	a := insertJobs(t, d, q, j)[0]
	legacy := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10) + ":" + a.ID
	require.NoError(t, client.Do(jobCtx(t), client.B().Hset().Key(d.queueKeys(q).keys[keyUnique]).
		FieldValue().FieldValue("u", legacy).Build()).Error())
	const short = 10 * time.Millisecond
	time.Sleep(2 * short) // a was inserted longer than short ago
	twin := newJob("throttled", 1)
	twin.Unique = &batondriver.JobUnique{Key: "u", Scope: batondriver.UniquePeriod, Period: short,
		OnConflict: batondriver.UniqueReject}
	res, err := d.JobInsert(jobCtx(t), &batondriver.JobInsertParams{Queue: q, Jobs: []*batondriver.JobInsert{twin}})
	require.NoError(t, err)
	require.Equal(t, batondriver.JobRejected, res.Status[0])
	require.Equal(t, "duplicate of "+a.ID, res.Reason[0])
}

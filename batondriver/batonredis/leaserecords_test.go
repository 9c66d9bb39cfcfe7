package batonredis

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/redistest"
)

// lostReplySetup returns a driver whose connections go through a proxy, a
// driver with the same prefix connected directly to look at the jobs, and
// a queue; the proxied driver has a sample of the server's clock, so that
// its leasing calls carry deadlines.
func lostReplySetup(t *testing.T) (*faultproxy.Proxy, *Driver, *Driver, string) {
	t.Helper()
	srv := redistest.SharedServer(t)
	px := faultproxy.StartT(t, srv.Addr())
	t.Cleanup(px.Heal) // before the clients close
	// One connection, so that after a cut the next call reconnects rather
	// than meet another connection cut.
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{px.Addr()}, PipelineMultiplex: -1})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	d := newDriver(t, client)
	check := faultDriver(t, newClient(t, srv.Addr()), d.prefix)
	q := "q" + randomHex(4)
	_, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
	require.NoError(t, err)
	return px, d, check, q
}

// keyedJobs returns n jobs of kind "keyed" and concurrency key "k" of
// limit 1, to insert.
func keyedJobs(n int) []*batondriver.JobInsert {
	jobs := make([]*batondriver.JobInsert, n)
	for i := range jobs {
		jobs[i] = newJob("keyed", 1)
		jobs[i].Key, jobs[i].Limit = "k", 1
	}
	return jobs
}

// jobState returns job id's state and attempt.
func jobState(t *testing.T, d *Driver, q, id string) (batondriver.JobState, int) {
	t.Helper()
	j, err := d.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: id})
	require.NoError(t, err)
	return j.State, j.Attempt
}

// A fetch the server ran but whose reply was lost leased its jobs to
// nobody. The driver's next call gives them back as if never leased and
// leases them again: attempts not counted twice, so a job of one attempt
// still runs; the keyed job keeps its place before the job chained behind
// it, and gets a new fence.
func TestLostFetchReplyGivesJobsBack(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	once := newJob("once", 1)
	once.MaxAttempts = 1
	first, second := newJob("keyed", 1), newJob("keyed", 1)
	first.Key, first.Limit = "k", 1
	second.Key, second.Limit = "k", 1
	rows := insertJobs(t, check, q, once, first, second)
	fetch := func() (*batondriver.JobFetchResult, error) {
		return d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 3, LeaseTTL: time.Minute, Chain: true})
	}

	px.LoseReplyTo("_job_fetch")
	_, err := fetch()
	require.Error(t, err, "the reply was lost")
	for _, r := range rows {
		state, attempt := jobState(t, check, q, r.ID)
		require.Equal(t, batondriver.JobStateRunning, state, "the server ran the lost fetch")
		require.Equal(t, 1, attempt)
	}
	lostFence, err := check.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[1].ID})
	require.NoError(t, err)
	require.Equal(t, 1, d.leases.lostCalls(q))

	got, err := fetch()
	require.NoError(t, err)
	require.Equal(t, ids(rows), ids(got.Jobs), "leased again, in their order, the second chained behind the first")
	for _, j := range got.Jobs {
		require.Equal(t, 1, j.Attempt, "job %s: the lost lease counted no attempt", j.Kind)
	}
	require.Greater(t, got.Jobs[1].Fence, lostFence.Fence)
	require.Zero(t, d.leases.lostCalls(q), "settled")
}

// The same for a finish that fetches: its outcome stands, and the job it
// leased is given back by the next call.
func TestLostFinishReplyGivesJobsBack(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	rows := insertJobs(t, check, q, newJob("k", 1), newJob("k", 1))
	done := fetchJobs(t, d, q, 1, time.Minute).Jobs[0]

	px.LoseReplyTo("_job_finish")
	_, err := d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
		Fetch:    &batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute},
		Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: done.ID, Lease: done.Lease}, Outcome: batondriver.JobOutcomeCompleted}}})
	require.Error(t, err, "the reply was lost")
	state, _ := jobState(t, check, q, rows[0].ID)
	require.Equal(t, batondriver.JobStateCompleted, state)
	state, _ = jobState(t, check, q, rows[1].ID)
	require.Equal(t, batondriver.JobStateRunning, state, "the lost finish leased the next job")

	got := fetchJobs(t, d, q, 1, time.Minute)
	require.Equal(t, []string{rows[1].ID}, ids(got.Jobs))
	require.Equal(t, 1, got.Jobs[0].Attempt)
	require.Zero(t, d.leases.lostCalls(q))
}

// A finish with no outcomes settles the lost calls too (a client's Stop
// makes one per queue), all of them though one call settles at most
// maxSettle, and with none lost it makes no call at all.
func TestEmptyFinishSettlesLostCalls(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	jobs := make([]*batondriver.JobInsert, maxSettle+3)
	for i := range jobs {
		jobs[i] = newJob("k", 1)
	}
	rows := insertJobs(t, check, q, jobs...)
	empty := func() error {
		_, err := d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q})
		return err
	}

	// Each fetch settles the oldest maxSettle calls lost before it, and
	// leases a job; its reply is lost, so the driver keeps them all lost,
	// and the jobs of the last calls are running under leases nobody holds.
	for range rows {
		px.LoseReplyTo("_job_fetch")
		_, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
		require.Error(t, err, "the reply was lost")
	}
	require.Equal(t, len(rows), d.leases.lostCalls(q))
	running := 0
	for _, r := range rows {
		if state, _ := jobState(t, check, q, r.ID); state == batondriver.JobStateRunning {
			running++
		}
	}
	require.NotZero(t, running, "the jobs of the calls no later call settled")

	require.NoError(t, empty())
	for _, r := range rows {
		state, attempt := jobState(t, check, q, r.ID)
		require.Equal(t, batondriver.JobStateAvailable, state, "given back")
		require.Zero(t, attempt, "as never leased")
	}
	require.Zero(t, d.leases.lostCalls(q), "settled")

	px.Partition()
	require.NoError(t, empty(), "nothing lost: no call to the unreachable server")
}

// loseFetchUnread makes a fetch of one job from q that the server never
// reads: held in the partitioned proxy, then lost with its connection.
func loseFetchUnread(t *testing.T, px *faultproxy.Proxy, d *Driver, q string) {
	t.Helper()
	px.Partition()
	failed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
		failed <- err
	}()
	time.Sleep(100 * time.Millisecond) // the fetch is held in the proxy
	px.Cut()                           // and lost with its connection
	px.Heal()
	select {
	case err := <-failed:
		require.Error(t, err)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the fetch did not fail when its connection was cut")
	}
}

// A call cut off before the server read it leaves no record. It could
// still arrive late, so the driver keeps it lost until the server's clock
// passes the call's deadline, and settles it then.
func TestLostCallWithoutRecordSettlesAfterItsDeadline(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	rows := insertJobs(t, check, q, newJob("k", 1))

	loseFetchUnread(t, px, d, q)
	cut := time.Now()
	require.Equal(t, 1, d.leases.lostCalls(q))
	// Calls that lease nothing settle the lost one too.
	upkeep := func() error {
		_, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
		return err
	}
	require.NoError(t, upkeep())
	if time.Since(cut) < time.Second {
		require.Equal(t, 1, d.leases.lostCalls(q), "settled before its deadline")
	}

	got := fetchJobs(t, d, q, 1, time.Minute)
	require.Equal(t, []string{rows[0].ID}, ids(got.Jobs), "the lost fetch never ran")
	require.Equal(t, 1, got.Jobs[0].Attempt)
	require.Eventually(t, func() bool { return upkeep() == nil && d.leases.lostCalls(q) == 0 },
		5*time.Second, 50*time.Millisecond, "not settled after its deadline")
}

// The bookkeeping alone: a call's record key is reused once its reply
// arrived, not while its call is lost; a lost call is settled by the
// calls after it, and one the server leaves unsettled is kept until its
// time is up, then its key is free again.
func TestLeaseRecordsBookkeeping(t *testing.T) {
	var r leaseRecords
	const base, q = "p:queue:{q}:", "q"
	a := r.begin(base, q, true)
	require.Equal(t, []string{"k", a.key}, a.keys([]string{"k"}))
	nonce, spec := a.args()
	require.NotEmpty(t, nonce)
	require.Empty(t, spec)
	r.end(a, nil, nil, 0, time.Minute)
	b := r.begin(base, q, true)
	require.Equal(t, a.key, b.key, "reused once its reply arrived")
	require.NotEqual(t, a.nonce, b.nonce)

	r.end(b, errors.New("cut"), nil, 1234, time.Minute)
	require.Equal(t, 1, r.lostCalls(q))
	c := r.begin(base, q, true)
	require.NotEqual(t, b.key, c.key, "not reused while its call is lost")
	require.Equal(t, []string{"k", c.key, b.key, "job"}, c.keys([]string{"k"}, "job"))
	_, spec = c.args()
	require.Equal(t, b.nonce+":1234", spec)
	require.Zero(t, r.lostCalls(q), "taken by the call that settles it")

	// That call fails too: both are lost.
	r.end(c, errors.New("cut"), nil, 0, time.Minute)
	require.Equal(t, 2, r.lostCalls(q))
	d := r.begin(base, q, false)
	require.Empty(t, d.key)
	require.Len(t, d.settle, 2)
	// The server settles the first and leaves the second (no record yet).
	r.end(d, nil, []int64{2}, 0, time.Minute)
	require.Equal(t, 1, r.lostCalls(q))
	e := r.begin(base, q, true)
	require.Equal(t, b.key, e.key, "the settled call's key is free")
	require.Len(t, e.settle, 1)
	require.Equal(t, c.key, e.settle[0].key)

	// Left unsettled past its time: given up, its key free.
	e.settle[0].until = time.Now().Add(-time.Second)
	r.end(e, nil, []int64{1}, 0, time.Minute)
	require.Zero(t, r.lostCalls(q))
	g := r.begin(base, q, true)
	require.Equal(t, c.key, g.key)
}

// A job chained by a finish whose reply was lost may take over its slot in
// a later finish, which chains the next job behind it and whose reply
// arrives. The next call gives it back (take_back), the job chained behind
// it back to the head of the parked jobs, and may lease it again to the
// same process: then the job chained behind the lease taken back has a
// fence below that of the new lease, which is how a client tells the stale
// chain from the live one (baton's launch), and its lease is stale.
func TestLostChainTakenBackUnderAChainThatArrived(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	rows := insertJobs(t, check, q, keyedJobs(4)...)
	finish := func(j *batondriver.JobRow) (*batondriver.JobFinishResult, error) {
		return d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour, Chain: true,
			Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: batondriver.JobOutcomeCompleted}}})
	}

	got, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute, Chain: true})
	require.NoError(t, err)
	require.Equal(t, ids(rows[:2]), ids(got.Jobs), "the second job chained behind the first")
	a, b := got.Jobs[0], got.Jobs[1]

	px.LoseReplyTo("_job_finish")
	_, err = finish(a)
	require.Error(t, err, "the reply was lost")
	c, err := check.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[2].ID})
	require.NoError(t, err)
	require.Equal(t, b.ID, c.After, "the lost finish chained the third job behind the second")

	// The second job's finish, sent before the lost one failed (so it
	// settles nothing), hands the slot to the third job, which nobody
	// runs, and chains the fourth behind it.
	d.leases.mu.Lock()
	lost := d.leases.queue(q).lost
	d.leases.queue(q).lost = nil
	d.leases.mu.Unlock()
	res, err := finish(b)
	require.NoError(t, err)
	d.leases.mu.Lock()
	d.leases.queue(q).lost = append(lost, d.leases.queue(q).lost...)
	d.leases.mu.Unlock()
	require.Equal(t, []string{rows[3].ID}, ids(res.Jobs))
	stale := res.Jobs[0]
	require.Equal(t, c.ID, stale.After)

	// The next call takes the third job back, and the fourth; leases the
	// third again, and chains the fourth behind it anew.
	got, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute, Chain: true})
	require.NoError(t, err)
	require.Equal(t, ids(rows[2:]), ids(got.Jobs))
	again, live := got.Jobs[0], got.Jobs[1]
	require.Equal(t, 1, again.Attempt, "the lease taken back counted no attempt")
	require.Equal(t, 1, live.Attempt)
	require.Equal(t, again.ID, live.After)
	require.Less(t, stale.Fence, again.Fence, "the stale chain's fence is below the new lease's")
	require.Greater(t, live.Fence, again.Fence)

	// The stale chained lease records nothing.
	res, err = finish(stale)
	require.NoError(t, err)
	require.Equal(t, []string{stale.ID}, res.Stale)
	state, _ := jobState(t, check, q, live.ID)
	require.Equal(t, batondriver.JobStateRunning, state)
}

// A finish with no outcomes settles every lost call it can, even when the
// oldest maxSettle of them cannot be settled yet (calls without deadline
// and without record may still arrive): a call that settles none of those
// has not looked at the rest.
func TestEmptyFinishSettlesBehindUnsettledCalls(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	rows := insertJobs(t, check, q, newJob("k", 1))
	qk := d.queueKeys(q)
	// maxSettle lost calls that never ran, without deadline: they stay
	// lost for minLostWait.
	for range maxSettle {
		c := d.leases.begin(qk.base, q, true)
		d.leases.end(c, errors.New("cut"), nil, 0, time.Minute)
	}
	px.LoseReplyTo("_job_fetch")
	_, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
	require.Error(t, err, "the reply was lost")
	state, _ := jobState(t, check, q, rows[0].ID)
	require.Equal(t, batondriver.JobStateRunning, state, "the server ran the lost fetch")
	require.Equal(t, maxSettle+1, d.leases.lostCalls(q))

	_, err = d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q})
	require.NoError(t, err)
	state, attempt := jobState(t, check, q, rows[0].ID)
	require.Equal(t, batondriver.JobStateAvailable, state, "given back")
	require.Zero(t, attempt)
	require.Equal(t, maxSettle, d.leases.lostCalls(q), "the calls that may still arrive")
}

// A lost call's chained job, taken back, goes to the head of its key's
// parked jobs; a slot of the key that freed while it was chained is free
// still (nothing else was parked to promote into it), so the settling call
// promotes it there at once rather than leave it parked beside a free
// slot.
func TestLostChainTakenBackIntoFreedSlot(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	var jobs []*batondriver.JobInsert
	for range 3 {
		j := newJob("keyed", 1)
		j.Key, j.Limit = "k", 2
		jobs = append(jobs, j)
	}
	rows := insertJobs(t, check, q, jobs...)
	first, err := check.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Equal(t, ids(rows[:1]), ids(first.Jobs))

	px.LoseReplyTo("_job_fetch")
	_, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute, Chain: true})
	require.Error(t, err, "the reply was lost")
	c, err := check.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[2].ID})
	require.NoError(t, err)
	require.Equal(t, rows[1].ID, c.After, "the lost fetch chained the third job behind the second")

	// The first job's slot frees with nothing parked to take it.
	res, err := check.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
		Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: first.Jobs[0].ID, Lease: first.Jobs[0].Lease},
			Outcome: batondriver.JobOutcomeCompleted}}})
	require.NoError(t, err)
	require.Empty(t, res.Stale)

	// The next call, which leases nothing, settles the lost fetch: both
	// its jobs available again, each in a slot of the key.
	require.Equal(t, 1, d.leases.lostCalls(q))
	_, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Zero(t, d.leases.lostCalls(q), "settled")
	for _, r := range rows[1:] {
		state, attempt := jobState(t, check, q, r.ID)
		require.Equal(t, batondriver.JobStateAvailable, state, "job %s", r.ID)
		require.Zero(t, attempt)
	}
	info, err := check.KeyGet(jobCtx(t), &batondriver.KeyParams{Queue: q, Key: "k"})
	require.NoError(t, err)
	require.Equal(t, []int{2, 0}, []int{info.Holding, info.Parked})
}

// A lost call whose settling call failed in turn is settled again by a
// later call, its record read again. Its job, given back the first time,
// may have been leased since, by another process: that lease is not the
// one recorded, and the job runs on under it, its attempt counted once.
func TestSettledAgainLeavesAJobLeasedSince(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	rows := insertJobs(t, check, q, newJob("k", 1))

	px.LoseReplyTo("_job_fetch")
	_, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
	require.Error(t, err, "the reply was lost")
	// An empty finish settles it, the job given back, and its own reply
	// is lost: the fetch stays lost.
	px.LoseReplyTo("_job_finish")
	_, err = d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q})
	require.Error(t, err, "the reply was lost")
	state, attempt := jobState(t, check, q, rows[0].ID)
	require.Equal(t, []any{batondriver.JobStateAvailable, 0}, []any{state, attempt}, "given back")
	require.Equal(t, 1, d.leases.lostCalls(q))

	since := fetchJobs(t, check, q, 1, time.Minute).Jobs
	require.Equal(t, ids(rows), ids(since), "leased by another process")
	_, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Zero(t, d.leases.lostCalls(q), "settled")
	state, attempt = jobState(t, check, q, rows[0].ID)
	require.Equal(t, []any{batondriver.JobStateRunning, 1}, []any{state, attempt}, "the lease since taken back")
	res, err := check.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
		Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: since[0].ID, Lease: since[0].Lease},
			Outcome: batondriver.JobOutcomeCompleted}}})
	require.NoError(t, err)
	require.Empty(t, res.Stale, "the lease since was lost")
}

// A call that settles a lost call and leases writes its own record under
// its own key, leaving the lost call's record where it was. If its reply
// is lost too, a later call settles both: what the first call leased it
// found taken back already, and what the second leased it takes back from
// the second's record, as never leased. The second call is a fetch or a
// finish that fetches.
func TestSettleLeavesAnEarlierCallsRecord(t *testing.T) {
	t.Parallel()
	for _, second := range []string{"_job_fetch", "_job_finish"} {
		t.Run(second, func(t *testing.T) {
			t.Parallel()
			px, d, check, q := lostReplySetup(t)
			var done *batondriver.JobRow // the job whose outcome the finish records
			if second == "_job_finish" {
				insertJobs(t, check, q, newJob("k", 1))
				done = fetchJobs(t, d, q, 1, time.Minute).Jobs[0]
			}
			rows := insertJobs(t, check, q, newJob("k", 1))

			px.LoseReplyTo("_job_fetch")
			_, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
			require.Error(t, err, "the reply was lost")
			// The second call gives the job back and leases it again.
			px.LoseReplyTo(second)
			if done == nil {
				_, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute})
			} else {
				_, err = d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
					Fetch: &batondriver.JobFinishFetch{Max: 1, LeaseTTL: time.Minute},
					Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: done.ID, Lease: done.Lease},
						Outcome: batondriver.JobOutcomeCompleted}}})
			}
			require.Error(t, err, "the reply was lost")
			state, attempt := jobState(t, check, q, rows[0].ID)
			require.Equal(t, []any{batondriver.JobStateRunning, 1}, []any{state, attempt}, "leased again by the second call")
			require.Equal(t, 2, d.leases.lostCalls(q))

			_, err = d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
			require.NoError(t, err)
			state, attempt = jobState(t, check, q, rows[0].ID)
			require.Equal(t, []any{batondriver.JobStateAvailable, 0}, []any{state, attempt}, "given back, as never leased")
			require.Zero(t, d.leases.lostCalls(q), "both settled")
		})
	}
}

// A call cut off before the server read it wrote no record, but its key,
// reused, may hold the record of the call that had it before and whose
// reply arrived. The settle tells that record by its nonce and leaves its
// jobs alone: they run under leases their worker holds.
func TestLostCallLeavesTheRecordBeforeIt(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	rows := insertJobs(t, check, q, newJob("k", 1))
	held := fetchJobs(t, d, q, 1, time.Minute).Jobs // its record stays under the key, now free
	require.Equal(t, ids(rows), ids(held))

	loseFetchUnread(t, px, d, q)
	require.Equal(t, 1, d.leases.lostCalls(q))

	_, err := d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, LeaseTTL: time.Minute})
	require.NoError(t, err)
	state, attempt := jobState(t, check, q, rows[0].ID)
	require.Equal(t, []any{batondriver.JobStateRunning, 1}, []any{state, attempt}, "the job of the call before was taken back")
	res, err := d.JobFinish(jobCtx(t), &batondriver.JobFinishParams{Queue: q, Retention: time.Hour,
		Finished: []*batondriver.JobFinish{{JobLease: batondriver.JobLease{ID: held[0].ID, Lease: held[0].Lease},
			Outcome: batondriver.JobOutcomeCompleted}}})
	require.NoError(t, err)
	require.Empty(t, res.Stale, "its lease was lost")
}

// A job that a call whose reply was lost leased, and whose cancel an admin
// asked for meanwhile, is not given back to run by the call that settles
// the lost one: it ends cancelled, its attempt not counted (it never ran),
// whether it held its key's slot or was chained behind the job that did.
// A job chained behind a cancelled holder is not lost: it is given back to
// the head of the parked jobs, promoted into the freed slot and leased.
func TestLostCallsCancelledJobsEndCancelled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cancel []int // which of the holder (0) and the job chained behind it (1)
		leased int   // the job the settling fetch leases
	}{
		{"Holder", []int{0}, 1},
		{"Chained", []int{1}, 0},
		{"Both", []int{0, 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			px, d, check, q := lostReplySetup(t)
			rows := insertJobs(t, check, q, keyedJobs(3)...)
			fetch := func() (*batondriver.JobFetchResult, error) {
				return d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: time.Minute, Chain: true})
			}

			px.LoseReplyTo("_job_fetch")
			_, err := fetch()
			require.Error(t, err, "the reply was lost")
			for _, i := range tc.cancel {
				row, err := check.JobCancel(jobCtx(t), &batondriver.JobCancelParams{Queue: q, ID: rows[i].ID, Reason: "stop"})
				require.NoError(t, err)
				require.Equal(t, batondriver.JobStateRunning, row.State, "the lost fetch leased it")
				require.False(t, row.CancelRequestedAt.IsZero())
			}

			got, err := fetch()
			require.NoError(t, err)
			require.Zero(t, d.leases.lostCalls(q), "settled")
			require.Equal(t, rows[tc.leased].ID, got.Jobs[0].ID)
			require.Equal(t, 1, got.Jobs[0].Attempt)
			for _, i := range tc.cancel {
				j, err := check.JobGet(jobCtx(t), &batondriver.JobGetParams{Queue: q, ID: rows[i].ID})
				require.NoError(t, err)
				require.Equal(t, batondriver.JobStateCancelled, j.State)
				require.Zero(t, j.Attempt, "the lost lease counted no attempt")
				require.Equal(t, []batondriver.AttemptError{{Attempt: 0, At: j.FinishedAt, Error: "stop"}}, j.Errors)
				require.True(t, j.CancelRequestedAt.IsZero())
			}
		})
	}
}

// A lost call settled only after its leases ran out (its driver's process
// stalled, or fetched nothing for longer than the lease) still gives its
// jobs back, as never leased: the record outlives the leases, and the
// settle comes before the same call takes expired leases back. (With a
// record that expired with the leases, the job of one attempt went dead
// without having run, as TestRedisStallsWasteNoAttempt once saw on a
// loaded machine.)
func TestLostCallSettledAfterItsLeasesExpired(t *testing.T) {
	t.Parallel()
	px, d, check, q := lostReplySetup(t)
	once := newJob("once", 1)
	once.MaxAttempts = 1
	rows := insertJobs(t, check, q, once)
	const ttl = 200 * time.Millisecond
	fetch := func() (*batondriver.JobFetchResult, error) {
		return d.JobFetch(jobCtx(t), &batondriver.JobFetchParams{Queue: q, Max: 1, LeaseTTL: ttl})
	}

	px.LoseReplyTo("_job_fetch")
	_, err := fetch()
	require.Error(t, err, "the reply was lost")
	state, _ := jobState(t, check, q, rows[0].ID)
	require.Equal(t, batondriver.JobStateRunning, state, "the server ran the lost fetch")
	time.Sleep(2 * ttl)

	got, err := fetch()
	require.NoError(t, err)
	require.Equal(t, ids(rows), ids(got.Jobs), "given back, not taken back as expired, and leased again")
	require.Equal(t, 1, got.Jobs[0].Attempt, "the lost lease counted no attempt")
	require.Zero(t, got.Recovered)
	require.Zero(t, d.leases.lostCalls(q), "settled")
}

package baton_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// allStates are the states a job can be in.
var allStates = []baton.JobState{baton.JobStateScheduled, baton.JobStateParked, baton.JobStateAvailable,
	baton.JobStateRunning, baton.JobStateCompleted, baton.JobStateCancelled, baton.JobStateDead, baton.JobStateDropped}

// rdbRun is one run of a handler in TestRedisRDBRestartLosesWritesSince.
type rdbRun struct {
	job        string
	key        string // "" for a plain job
	fence      int64
	attempt    int
	start, end int64 // lockcheck.Now
	lost       bool  // its context ended with ErrLeaseLost
}

// TestRedisRDBRestartLosesWritesSince crashes a Redis (SIGKILL) that
// persists by RDB snapshot only, and restarts it from a snapshot (SAVE)
// taken while jobs and leases were under way, with writes after it: jobs
// inserted and completed, locks granted, fences issued. A restart from the
// snapshot loses those writes; with no client recreated, the test asserts
// what docs/locking.md and docs/concurrency.md promise across it, and
// records what is lost:
//
//   - every fence issued after the restart, of a job key or a lock key, is
//     above every fence issued before the crash, those after the snapshot
//     included (the time floor max(last+1, ms×1024));
//   - a job running at the snapshot and completed after it comes back
//     running, its lease from the snapshot; it runs again once that lease
//     expires (at least once: counted, and each ran exactly twice);
//   - a job inserted after the snapshot is gone, though its insert was
//     acknowledged (the documented loss);
//   - a lease granted after the snapshot is unknown to the server: another
//     locker is granted it at once while its old holder still trusts it,
//     and the old holder's context ends within a heartbeat interval; a
//     lease granted before the snapshot is still held;
//   - the workers go on without a restart: jobs inserted after it run,
//     and every job the server knows ends completed; no key ran more jobs
//     at once than its limit, and a key's fences follow real time
//     (keycheck over the runs before and after the crash).
//
// Shown to fail (one-off edits, reverted): with the time floor removed
// from job fences (joblib.lua: fence = last) the job fence assertion and
// keycheck fail; with it removed from lock fences (lib.lua: st.fence + 1)
// the lock fence assertion fails; with a heartbeat that ignores a lease
// found gone (lease.go: extend returns nil on !Extended) the old holder's
// context does not end and the bound fails; with expired running jobs
// never taken back (the jobs of the snapshot stay running) the terminal
// state assertion fails.
func TestRedisRDBRestartLosesWritesSince(t *testing.T) {
	t.Parallel()
	// redistest keeps no automatic snapshots (--save ""), but SAVE writes
	// dump.rdb into the server's directory, and a server started with
	// --appendonly no loads it: Restart comes back from the snapshot.
	srv := redistest.StartT(t, nil)
	d := redisDriver(t, srv.Addr(), "")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	gate := make(chan struct{})
	var gated atomic.Int32
	var mu sync.Mutex
	var runs []*rdbRun
	handle := func(ctx context.Context, id, key string, fence int64, attempt int, wait bool) error {
		r := &rdbRun{job: id, key: key, fence: fence, attempt: attempt, start: lockcheck.Now()}
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
		var err error
		if wait && attempt == 1 {
			gated.Add(1)
			select {
			case <-gate:
			case <-ctx.Done():
				err = ctx.Err()
			}
		} else {
			time.Sleep(2 * time.Millisecond)
		}
		end := lockcheck.Now()
		mu.Lock()
		r.end, r.lost = end, errors.Is(context.Cause(ctx), baton.ErrLeaseLost)
		mu.Unlock()
		return err
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		return handle(ctx, job.ID, job.Key, job.Fence, job.Attempt, job.Args.N >= 1000 && job.Args.N < 2000)
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		return handle(ctx, job.ID, "", 0, job.Attempt, strings.HasPrefix(job.Args.To, "gate"))
	}), nil)
	const leaseTTL = time.Second // the jobs'
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 16, LeaseTTL: leaseTTL,
		PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	const customers = 4
	limits := map[string]int{}
	for i := range customers {
		limits[fmt.Sprint("customer:c", i)] = 1
	}
	insert := func(args baton.JobArgs) string {
		t.Helper()
		res, err := c.Insert(ctx, args, nil)
		require.NoError(t, err)
		return res.Job.ID
	}
	insertBatch := func(keyed, plain, n int, gate bool) []string {
		var ids []string
		for i := range keyed {
			ids = append(ids, insert(webhookArgs{Customer: fmt.Sprint("c", i%customers), N: n + i}))
		}
		for i := range plain {
			to := fmt.Sprint("mail", n+i)
			if gate {
				to = "gate" + to
			}
			ids = append(ids, insert(emailArgs{To: to}))
		}
		return ids
	}
	waitStates := func(want map[baton.JobState]int, msg string) {
		t.Helper()
		var last map[baton.JobState]int
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			st, err := c.QueueStats(ctx, "default")
			if err != nil {
				continue
			}
			last = st.Counts
			if !slices.ContainsFunc(allStates, func(s baton.JobState) bool { return st.Counts[s] != want[s] }) {
				return
			}
		}
		require.FailNowf(t, "job states", "%s: counts %v, want %v", msg, last, want)
	}

	// Locks: A grants and holds, B contends after the restart.
	const lockTTL = 3 * time.Second
	const heartbeat = lockTTL / 3
	la, err := batonlock.New(redisDriver(t, srv.Addr(), ""), &batonlock.Config{TTL: lockTTL, Logger: quiet})
	require.NoError(t, err)
	lb, err := batonlock.New(redisDriver(t, srv.Addr(), ""), &batonlock.Config{TTL: lockTTL, Logger: quiet})
	require.NoError(t, err)
	const fencesKey, keptKey, lostKey = "rdb:fences", "rdb:kept", "rdb:lost"
	// tryAcquire is TryAcquire, made again while it fails otherwise than
	// ErrNotAcquired: after the restart, a call on a connection the crash
	// broke fails (EOF), the first time rueidis uses it.
	tryAcquire := func(l *batonlock.Locker, key string) (*batonlock.Lease, error) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
			ls, err := l.TryAcquire(actx, key, nil)
			acancel()
			if err == nil || errors.Is(err, batonlock.ErrNotAcquired) || time.Now().After(deadline) {
				return ls, err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// release is Release, made again while it fails so (but with
	// ErrNotHeld: a release the server knows nothing of).
	release := func(ls *batonlock.Lease) {
		t.Helper()
		for i := 0; ; i++ {
			err := ls.Release(ctx)
			if err == nil {
				return
			}
			require.NotErrorIs(t, err, batonlock.ErrNotHeld)
			require.Less(t, i, 100, "release: %v", err)
			time.Sleep(20 * time.Millisecond)
		}
	}
	var lockBefore, lockAfter []uint64 // lock fences issued before the crash, after the restart
	grants := func(l *batonlock.Locker, n int) []uint64 {
		var fs []uint64
		for range n {
			ls, err := tryAcquire(l, fencesKey)
			require.NoError(t, err)
			release(ls)
			fs = append(fs, ls.Fence())
		}
		return fs
	}
	hold := func(ls *batonlock.Lease) {
		t.Cleanup(func() { _ = ls.Release(context.Background()) })
	}

	// Before the snapshot: jobs completed, locks granted, a lease held,
	// and jobs running (held at the gate).
	done := insertBatch(12, 6, 0, false)
	waitStates(map[baton.JobState]int{baton.JobStateCompleted: len(done)}, "the first jobs")
	lockBefore = append(lockBefore, grants(la, 5)...)
	kept, err := la.TryAcquire(ctx, keptKey, nil)
	require.NoError(t, err)
	hold(kept)
	lockBefore = append(lockBefore, kept.Fence())
	again := insertBatch(customers, 4, 1000, true)
	require.Eventually(t, func() bool { return gated.Load() == int32(len(again)) }, 5*time.Second, time.Millisecond, "the gated jobs run")

	admin, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, ForceSingleClient: true,
		DisableRetry: true})
	require.NoError(t, err)
	defer admin.Close()
	require.NoError(t, admin.Do(ctx, admin.B().Save().Build()).Error())
	snapshotNow := lockcheck.Now()

	// After it: inserts acknowledged (keyed ones parked behind the gated
	// jobs of their keys), the gated jobs completed, the new ones run,
	// locks granted and a lease held.
	gone := insertBatch(2*customers, 4, 2000, false)
	close(gate)
	waitStates(map[baton.JobState]int{baton.JobStateCompleted: len(done) + len(again) + len(gone)}, "the jobs before the crash")
	lockBefore = append(lockBefore, grants(la, 5)...)
	lost, err := la.TryAcquire(ctx, lostKey, nil)
	require.NoError(t, err)
	lostAt := time.Now()
	hold(lost)
	lockBefore = append(lockBefore, lost.Fence())
	lostEnded := make(chan time.Time, 1)
	context.AfterFunc(lost.Context(), func() { lostEnded <- time.Now() })

	require.NoError(t, srv.Kill())
	crashNow := lockcheck.Now()
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, srv.Restart())
	restartedAt := time.Now()

	// B is granted lostKey at once: the server never heard of A's lease.
	taken, err := tryAcquire(lb, lostKey)
	require.NoError(t, err, "the lease granted after the snapshot survived the restart, or no grant 10s after it")
	takenAt := time.Now()
	hold(taken)
	oldTrusted := lost.Err() == nil
	lockAfter = append(lockAfter, taken.Fence())
	var lostEndedAt time.Time
	select {
	case lostEndedAt = <-lostEnded:
	case <-time.After(lockTTL):
		require.FailNow(t, "the old holder's lease did not end")
	}
	require.ErrorIs(t, lost.Err(), batonlock.ErrNotHeld, "the old holder's lease ended otherwise")
	// Two holders, but for no longer than about a heartbeat interval: A's
	// next heartbeat, due a heartbeat interval after its grant, finds the
	// lease gone. Its first call after the restart, on the connection the
	// crash broke (rueidis finds it broken only then), fails with EOF in
	// most runs; a first failure is retried at once. (It was retried a
	// quarter interval later, and A's lease ended 1.25s after its grant
	// and 0.85-1.12s after B's, with a heartbeat interval of 1s.)
	if takenAt.Sub(lostAt) < heartbeat-100*time.Millisecond {
		require.True(t, oldTrusted, "A's lease ended before its first heartbeat was due")
	}
	// A's heartbeat was due a heartbeat interval after its grant; a first
	// failure (EOF) is retried at once, not a quarter interval later.
	require.Less(t, lostEndedAt.Sub(lostAt), heartbeat+heartbeat/8,
		"the old holder's lease ended later than its first heartbeat after the restart, and one retry at once")
	overlap := lostEndedAt.Sub(takenAt)
	require.Less(t, overlap, heartbeat+150*time.Millisecond,
		"the old holder trusted a lease the server did not know for longer than a heartbeat interval after B's grant")
	t.Logf("B granted the lease lost with the snapshot %v after the restart, A still trusting it: %v; A's ended %v after B's grant, %v after its own",
		takenAt.Sub(restartedAt), oldTrusted, overlap, lostEndedAt.Sub(lostAt))

	// The lease of the snapshot is still held: B is refused it, and A's
	// heartbeat is answered by the restarted server.
	_, err = tryAcquire(lb, keptKey)
	require.ErrorIs(t, err, batonlock.ErrNotAcquired, "the lease of the snapshot was lost")
	confirmed := restartedAt.Add(lockTTL - lockTTL/100 - 2*time.Millisecond)
	require.Eventuallyf(t, func() bool { return kept.Until().After(confirmed) }, 2*heartbeat, 10*time.Millisecond,
		"no heartbeat of the lease of the snapshot confirmed after the restart: %v", kept.Err())
	require.NoError(t, kept.Err())
	release(kept) // EOF on a connection the crash broke: again
	lockAfter = append(lockAfter, grants(la, 5)...)
	lockAfter = append(lockAfter, grants(lb, 5)...)
	require.Greater(t, slices.Min(lockAfter), slices.Max(lockBefore),
		"a lock fence after the restart is not above every fence before the crash")

	// Jobs: the ones inserted after the snapshot are gone; the gated ones
	// run again; new ones run; all end completed.
	for _, id := range gone {
		_, err := c.JobGet(ctx, "default", id)
		require.ErrorIsf(t, err, baton.ErrJobNotFound, "job %s, inserted after the snapshot", id)
	}
	var fresh []string
	for i := range 8 {
		require.Eventually(t, func() bool { // retried while the client reconnects
			ictx, icancel := context.WithTimeout(ctx, 500*time.Millisecond)
			defer icancel()
			var args baton.JobArgs = emailArgs{To: fmt.Sprint("mail", 3000+i)}
			if i%2 == 0 {
				args = webhookArgs{Customer: fmt.Sprint("c", i%customers), N: 3000 + i}
			}
			res, err := c.Insert(ictx, args, nil)
			if err == nil {
				fresh = append(fresh, res.Job.ID)
			}
			return err == nil
		}, 10*time.Second, 20*time.Millisecond)
	}
	waitStates(map[baton.JobState]int{baton.JobStateCompleted: len(done) + len(again) + len(fresh)}, "every job after the restart")

	mu.Lock()
	defer mu.Unlock()
	count := map[string]int{}
	var execs []keycheck.Execution
	var maxBefore, minAfter int64
	for _, r := range runs {
		count[r.job]++
		require.NotZero(t, r.end, "job %s: a run never ended", r.job)
		if r.key == "" {
			continue
		}
		execs = append(execs, keycheck.Execution{Job: r.job, Key: r.key, Fence: r.fence, Start: r.start, End: r.end, Lost: r.lost})
		if r.start < crashNow {
			maxBefore = max(maxBefore, r.fence)
		} else if minAfter == 0 || r.fence < minAfter {
			minAfter = r.fence
		}
	}
	for _, id := range done {
		require.Equal(t, 1, count[id], "job %s, completed before the snapshot: runs", id)
	}
	for _, id := range again {
		require.Equal(t, 2, count[id], "job %s, completed after the snapshot: runs", id)
	}
	for _, id := range append(slices.Clip(gone), fresh...) {
		require.Equal(t, 1, count[id], "job %s: runs", id)
	}
	require.Len(t, count, len(done)+len(again)+len(gone)+len(fresh), "a job the test did not insert ran")
	require.Greater(t, minAfter, maxBefore, "a job fence after the restart is not above every fence before the crash")
	require.NoError(t, keycheck.Check(execs, limits))
	t.Logf("jobs: %d completed before the snapshot, once; %d completed after it ran twice; %d inserted after it gone; %d inserted after the restart; "+
		"job fences after the restart from %v of server time above the highest before; snapshot %v before the crash",
		len(done), len(again), len(gone), len(fresh), time.Duration(minAfter-maxBefore)*time.Millisecond/1024,
		time.Duration(crashNow-snapshotNow))
}

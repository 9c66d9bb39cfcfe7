package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/jobcheck"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The Cluster fault tests: keyed jobs and a lock in one queue's slot while
// that slot moves to another master (the resharding steps, MigrateSlot),
// or while its master is killed and its replica takes over (Failover).
// Every run is recorded; afterwards keycheck checks the keys' limits and
// fences, jobcheck that a job ran again only after its run before lost
// its lease, and every job acknowledged (and, for a failover, replicated)
// must be completed.

// clusterQueue is the queue of the Cluster fault tests; the lock key of
// the same name shares its hash tag, so its slot.
const clusterQueue = "mq"

// clusterKeys are the workload's concurrency keys and their limits.
var clusterKeys = func() map[string]int {
	m := map[string]int{}
	for i := range 24 {
		m[fmt.Sprintf("k%02d", i)] = 1 + 2*(i%2) // limits 1 and 3
	}
	return m
}()

// clusterRun is one run of a job's handler.
type clusterRun struct {
	job, key   string
	fence      int64
	start, end int64 // lockcheck.Now
	lost       bool  // its context ended with ErrLeaseLost
	recorded   bool  // its outcome acknowledged by the backend
}

// clusterWork is the keyed workload of a Cluster fault test: clients
// working clusterQueue, and what they ran and logged.
type clusterWork struct {
	t       *testing.T
	clients []*baton.Client
	drivers []*batonredis.Driver // the clients'
	log     *countingLog
	// long reports whether a run of the job of this N and attempt runs
	// until its context ends (at most 5s), not a few milliseconds. Set
	// before the first insert; default none.
	long func(n, attempt int) bool

	mu   sync.Mutex
	runs []*clusterRun
	last map[string]*clusterRun // job ID -> its latest run
	ids  []string               // acknowledged inserts, in order
	// every insert of insertEvery, in order
	inserts []failoverInsert
	// inserts that failed, by error
	failed map[string]int
}

// startClusterWork starts n clients on the Cluster at addrs, on a fresh
// prefix, working clusterQueue with keyed workers (limit 1, 3 for odd
// keys). Returns once they run.
func startClusterWork(t *testing.T, addrs []string, n int, leaseTTL time.Duration) (*clusterWork, string) {
	w := &clusterWork{t: t, log: &countingLog{}, last: map[string]*clusterRun{}, failed: map[string]int{}}
	prefix := fmt.Sprintf("cf%d", time.Now().UnixNano())
	for range n {
		d := redisDriver(t, strings.Join(addrs, ","), prefix)
		w.drivers = append(w.drivers, d)
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[keyedCrashArgs](w.work), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
			Key:   baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }),
			Limit: 1,
		}})
		c, err := baton.NewClient(acknowledgingDriver{d, w.acknowledged}, &baton.Config{
			Workers: workers, Concurrency: 8, LeaseTTL: leaseTTL, PollInterval: 100 * time.Millisecond,
			Queues: []baton.QueueConfig{{Name: clusterQueue}}, Logger: slog.New(w.log),
		})
		require.NoError(t, err)
		w.clients = append(w.clients, c)
	}
	for k, limit := range clusterKeys {
		if limit != 1 {
			_, err := w.clients[0].SetLimit(t.Context(), clusterQueue, k, limit)
			require.NoError(t, err)
		}
	}
	for _, c := range w.clients {
		start(t, c)
	}
	return w, prefix
}

func (w *clusterWork) work(ctx context.Context, job *baton.Job[keyedCrashArgs]) error {
	r := &clusterRun{job: job.ID, key: job.Key, fence: int64(job.Fence), start: lockcheck.Now()}
	w.mu.Lock()
	w.runs = append(w.runs, r)
	w.last[job.ID] = r
	w.mu.Unlock()
	d := time.Duration(2+rand.IntN(10)) * time.Millisecond
	if w.long != nil && w.long(job.Args.N, job.Attempt) {
		d = 5 * time.Second
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	end := lockcheck.Now()
	w.mu.Lock()
	r.end, r.lost = end, context.Cause(ctx) != nil
	w.mu.Unlock()
	return nil
}

// acknowledged marks the latest run of job id recorded: its outcome was
// acknowledged.
func (w *clusterWork) acknowledged(what, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.last[id]; r != nil && what == "recorded" {
		r.recorded = true
	}
}

// insert inserts one job of a random key and records its ID, or its error.
func (w *clusterWork) insert(ctx context.Context, n int) {
	key := fmt.Sprintf("k%02d", rand.IntN(len(clusterKeys)))
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	in := failoverInsert{sent: time.Now()}
	res, err := w.clients[n%len(w.clients)].Insert(ctx, keyedCrashArgs{Key: key, N: n}, &baton.InsertOpts{
		Queue: clusterQueue, MaxAttempts: 1000,
		Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }), Limit: 1},
	})
	in.returned, in.err = time.Now(), err
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed[err.Error()]++
	} else {
		in.id = res.Job.ID
		w.ids = append(w.ids, res.Job.ID)
	}
	w.inserts = append(w.inserts, in)
}

// insertEvery inserts a job every interval until stop is called, at most
// max; stop returns once the last insert returned.
func (w *clusterWork) insertEvery(interval time.Duration, max int) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for i := range max {
			select {
			case <-done:
				return
			case <-time.After(interval):
			}
			w.insert(context.Background(), i)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); <-stopped }) }
	w.t.Cleanup(stop)
	return stop
}

// failedInserts returns the errors of the failed inserts so far, and how
// many each.
func (w *clusterWork) failedInserts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.failed)
}

// acked returns the IDs of the acknowledged inserts so far.
func (w *clusterWork) acked() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ids)
}

// waitCompleted waits until every job of ids is completed, failing the
// test after limit with those that are not.
func (w *clusterWork) waitCompleted(ids []string, limit time.Duration) {
	t := w.t
	c := w.clients[0]
	deadline := time.Now().Add(limit)
	pending := slices.Clone(ids)
	for len(pending) > 0 {
		var still []string
		for _, id := range pending {
			row, err := c.JobGet(t.Context(), clusterQueue, id)
			if err != nil || row.State != baton.JobStateCompleted {
				still = append(still, id)
			}
		}
		pending = still
		if len(pending) > 0 && time.Now().After(deadline) {
			states := map[string]int{}
			for _, id := range pending {
				row, err := c.JobGet(t.Context(), clusterQueue, id)
				if err != nil {
					states[err.Error()]++
				} else {
					states[string(row.State)]++
				}
			}
			require.FailNowf(t, "jobs not completed", "%d of %d jobs not completed %v after: %v", len(pending), len(ids), limit, states)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check checks the runs of ids, every job of the history, with keycheck
// and jobcheck, and logs what the clients logged.
func (w *clusterWork) check(ids []string) {
	t := w.t
	w.mu.Lock()
	defer w.mu.Unlock()
	var kexecs []keycheck.Execution
	var jexecs []jobcheck.Execution
	lost := 0
	for _, r := range w.runs {
		kexecs = append(kexecs, keycheck.Execution{Job: r.job, Key: r.key, Fence: r.fence, Start: r.start, End: r.end, Lost: r.lost})
		jexecs = append(jexecs, jobcheck.Execution{Job: r.job, Start: r.start, End: r.end, Lost: r.lost, Recorded: r.recorded})
		if r.lost {
			lost++
		}
	}
	stats, err := w.clients[0].QueueStats(t.Context(), clusterQueue)
	require.NoError(t, err)
	stored := 0
	for _, n := range stats.Counts {
		stored += n
	}
	require.Equal(t, len(ids), stored, "jobs stored but not acknowledged, or lost: %v", stats.Counts)
	require.NoError(t, keycheck.Check(kexecs, clusterKeys))
	counts, err := jobcheck.Check(ids, jexecs)
	require.NoError(t, err)
	t.Logf("%d runs of %d jobs on %d keys (%d runs cut off by a lost lease): no key over its limit, fences in order, no job run again but after a lost lease",
		counts.Executions, counts.Jobs, len(clusterKeys), lost)
	t.Logf("inserts acknowledged %d, failed %d: %v", len(w.ids), sum(w.failed), w.failed)
	t.Logf("client warnings and errors: %v", w.log.counts())
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// countingLog is a slog.Handler that counts the records of Warn and above
// by message and error.
type countingLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (l *countingLog) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn
}

func (l *countingLog) Handle(_ context.Context, r slog.Record) error {
	what := r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" || a.Key == "error" {
			what += ": " + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == nil {
		l.n = map[string]int{}
	}
	l.n[what]++
	return nil
}

func (l *countingLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *countingLog) WithGroup(string) slog.Handler      { return l }

func (l *countingLog) counts() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.n)
}

// otherMaster returns a master of cluster other than m.
func otherMaster(t *testing.T, cluster *redistest.Cluster, m *redistest.Server) *redistest.Server {
	for _, slot := range []int{0, 8192, 16383} {
		o, err := cluster.Master(slot)
		require.NoError(t, err)
		if o != m {
			return o
		}
	}
	require.FailNow(t, "no other master")
	return nil
}

// TestClusterSlotMigrationKeepsJobs moves the slot of a busy queue, and of
// a held lock key in it, from its master to another with the resharding
// steps, a few keys at a time, while two clients fetch and finish keyed
// jobs (limits 1 and 3) and a third inserts. During the move a script of
// the slot whose keys are split between the two masters gets TRYAGAIN.
func TestClusterSlotMigrationKeepsJobs(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterT(t)
	// Leases long enough to outlast the move on a loaded machine.
	w, _ := startClusterWork(t, cluster.Addrs(), 2, 3*time.Second)
	ctx := t.Context()
	for i := range 300 {
		w.insert(ctx, 100000+i)
	}
	stopInserts := w.insertEvery(5*time.Millisecond, 5000)

	// A lease on the lock key of the queue's name, so in its slot, and a
	// waiter behind it, both on the first client's driver. The lease's
	// TTL (10s) and the waiter's rechecks (every 3.3s) are long, so that a
	// grant soon after the release came by its notice, SPUBLISHed on the
	// slot's new master.
	locker, err := batonlock.New(w.drivers[0], &batonlock.Config{Logger: quiet})
	require.NoError(t, err)
	held, err := locker.TryAcquire(ctx, clusterQueue, nil)
	require.NoError(t, err)
	queued := make(chan struct{})
	type acquired struct {
		lease *batonlock.Lease
		err   error
		at    time.Time
	}
	waiter := make(chan acquired, 1)
	go func() {
		ls, err := locker.Acquire(ctx, clusterQueue, &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
		waiter <- acquired{ls, err, time.Now()}
	}()
	select {
	case <-queued:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the waiter did not queue")
	}

	slot, err := cluster.Slot("{" + clusterQueue + "}")
	require.NoError(t, err)
	from, err := cluster.Master(slot)
	require.NoError(t, err)
	to := otherMaster(t, cluster, from)
	time.Sleep(300 * time.Millisecond)
	started := time.Now()
	moved, err := cluster.MigrateSlot(slot, to, &redistest.MigrateOptions{Batch: 5, Pause: 10 * time.Millisecond})
	require.NoError(t, err)
	t.Logf("slot %d: %d keys moved from %s to %s in %v", slot, moved, from.Addr(), to.Addr(), time.Since(started))
	time.Sleep(500 * time.Millisecond)
	stopInserts()

	require.NoError(t, held.Err(), "the lease held across the move")
	require.NoError(t, held.Release(ctx))
	releasedAt := time.Now()
	select {
	case r := <-waiter:
		require.NoError(t, r.err, "the waiter's Acquire")
		t.Logf("the waiter was granted %v after the release", r.at.Sub(releasedAt))
		require.Greater(t, r.lease.Fence(), held.Fence())
		require.NoError(t, r.lease.Release(ctx))
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the waiter queued before the move was not granted the lock released after it")
	}

	ids := w.acked()
	w.waitCompleted(ids, 20*time.Second)
	w.check(ids)
	// A script that got TRYAGAIN ran nothing: the driver sends it again
	// until its context ends, so the move fails no insert, fetch or finish
	// (before it did, ~150 inserts failed with TRYAGAIN). A heartbeat
	// gives up at its own deadline (a third of the lease), which a move
	// may outlast: it is logged and the next one goes on.
	require.Empty(t, w.failedInserts(), "inserts failed during the move")
	for what := range w.log.counts() {
		if !strings.Contains(what, "renewing job leases failed") {
			require.NotContains(t, what, "TRYAGAIN")
		}
	}
}

// failoverFences records the fences a lock key was granted, before and
// after a failover.
type failoverFences struct{ before, after []uint64 }

// lockOnMaster returns a lock key name, prefix followed by a number, whose
// slot master serves.
func lockOnMaster(t *testing.T, cluster *redistest.Cluster, master *redistest.Server, prefix string) string {
	for i := range 1000 {
		name := fmt.Sprint(prefix, i)
		slot, err := cluster.Slot("{" + name + "}") // a lock key's hash tag is its name (encoded: no brace here)
		require.NoError(t, err)
		if m, err := cluster.Master(slot); err == nil && m == master {
			return name
		}
	}
	require.FailNow(t, "no lock key name on the master")
	return ""
}

// elsewhereInserts sums up insertElsewhere's inserts.
type elsewhereInserts struct {
	ok      int
	slowest time.Duration
	failed  map[string]int // by error
}

// insertElsewhere inserts a job every 10ms, each given 5s, into a queue
// that a master other than master serves, until stop; the sums arrive on
// the channel once it stopped.
func insertElsewhere(t *testing.T, cluster *redistest.Cluster, master *redistest.Server, c *baton.Client) (stop func(), sums <-chan elsewhereInserts) {
	queue := ""
	for i := 0; queue == ""; i++ {
		require.Less(t, i, 1000, "no queue name of another master")
		slot, err := cluster.Slot(fmt.Sprint("{other", i, "}"))
		require.NoError(t, err)
		if m, err := cluster.Master(slot); err == nil && m != master {
			queue = fmt.Sprint("other", i)
		}
	}
	done := make(chan struct{})
	out := make(chan elsewhereInserts, 1)
	go func() {
		e := elsewhereInserts{failed: map[string]int{}}
		defer func() { out <- e }()
		for i := 0; i < 5000; i++ {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			began := time.Now()
			_, err := c.Insert(ctx, keyedCrashArgs{Key: "x", N: i}, &baton.InsertOpts{Queue: queue})
			cancel()
			if err != nil {
				e.failed[err.Error()]++
				continue
			}
			e.ok++
			e.slowest = max(e.slowest, time.Since(began))
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done) }) }
	t.Cleanup(stop)
	return stop, out
}

// TestClusterFailoverJobsAndLocks kills the master that serves a busy
// queue's slot, and three lock keys', while two clients work keyed jobs, a
// third inserts and leases are held; its replica takes over. The replica
// is first synced (Synced), then stalled: it stops reading (SIGSTOP) and
// a value larger than the kernel's socket buffers is written to the
// master, so that what the master acknowledges after it stays in the
// master's output buffer and dies with it. So the test knows which writes
// the new master has. Then, with no client recreated:
//
//   - jobs acknowledged before the sync, and inserted after the kill, all
//     complete; those acknowledged during the stall are gone (the caveat
//     of asynchronous replication, docs/locking.md);
//   - runs on the new master keep every key's limit and fence order
//     (keycheck), and their fences are above every fence before the kill;
//     runs of the dead master end within a lease of the kill;
//   - a lease granted before the sync stays held and its waiter is granted
//     it after its release; a lease granted during the stall is granted
//     again, and its old holder's context ends within a heartbeat interval
//     of that; every lock fence after the failover is above every fence
//     before it, across keys too;
//   - inserts into a queue of another master all succeed: they wait out
//     the time the whole cluster refuses commands (CLUSTERDOWN).
func TestClusterFailoverJobsAndLocks(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterOptsT(t, &redistest.ClusterOptions{Replicas: true, NodeTimeout: time.Second})
	const leaseTTL = 1500 * time.Millisecond // the jobs'
	w, _ := startClusterWork(t, cluster.Addrs(), 2, leaseTTL)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	slot, err := cluster.Slot("{" + clusterQueue + "}")
	require.NoError(t, err)
	master, err := cluster.Master(slot)
	require.NoError(t, err)
	replica, err := cluster.Replica(master)
	require.NoError(t, err)

	// Locks: A holds, B contends. Long enough that the replicated lease
	// outlives the failover however its heartbeats fell.
	const lockTTL = 6 * time.Second
	const heartbeat = lockTTL / 3
	la, err := batonlock.New(w.drivers[0], &batonlock.Config{TTL: lockTTL, Logger: quiet})
	require.NoError(t, err)
	// B's place lives WaitTTL after its last recheck that reached the
	// backend: longer than the failover (about 2.3s) and a recheck
	// interval (WaitTTL/3) together, so that B keeps it.
	lb, err := batonlock.New(w.drivers[1], &batonlock.Config{TTL: lockTTL, WaitTTL: 6 * time.Second, Logger: quiet})
	require.NoError(t, err)
	keptKey, lostKey, fencesKey := clusterQueue, lockOnMaster(t, cluster, master, "lost"), lockOnMaster(t, cluster, master, "fences")
	fences := map[string]*failoverFences{keptKey: {}, lostKey: {}, fencesKey: {}}
	grants := func(l *batonlock.Locker, n int, after bool) {
		for range n {
			ls, err := l.TryAcquire(ctx, fencesKey, nil)
			require.NoError(t, err)
			require.NoError(t, ls.Release(ctx))
			if f := fences[fencesKey]; after {
				f.after = append(f.after, ls.Fence())
			} else {
				f.before = append(f.before, ls.Fence())
			}
		}
	}
	release := func(ls *batonlock.Lease) {
		t.Cleanup(func() { _ = ls.Release(context.Background()) })
	}

	// Every tenth job inserted in the first second, on its first attempt,
	// runs until its context ends: across the kill.
	w.long = func(n, attempt int) bool { return n < 100 && n%10 == 0 && attempt == 1 }
	for i := range 100 {
		w.insert(ctx, 100000+i)
	}
	stopInserts := w.insertEvery(10*time.Millisecond, 5000)
	stopElsewhere, elsewhere := insertElsewhere(t, cluster, master, w.clients[0])
	time.Sleep(300 * time.Millisecond)

	// Replicated: grants of fencesKey, the lease on keptKey, B's place
	// behind it, jobs so far.
	grants(la, 10, false)
	kept, err := la.TryAcquire(ctx, keptKey, nil)
	require.NoError(t, err)
	release(kept)
	fences[keptKey].before = append(fences[keptKey].before, kept.Fence())
	queued := make(chan struct{})
	type acquired struct {
		lease *batonlock.Lease
		err   error
	}
	waiter := make(chan acquired, 1)
	go func() {
		ls, err := lb.Acquire(ctx, keptKey, &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
		waiter <- acquired{ls, err}
	}()
	select {
	case <-queued:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "B did not queue")
	}
	syncedAt := time.Now()
	require.NoError(t, replica.Synced())
	// The job functions, loaded on the masters (FUNCTION LOAD), reached
	// the replica too: the new master has them before any call.
	node, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{replica.Addr()}, ForceSingleClient: true})
	require.NoError(t, err)
	libs, err := node.Do(ctx, node.B().FunctionList().Libraryname("baton_*").Build()).ToArray()
	node.Close()
	require.NoError(t, err)
	require.Len(t, libs, 1, "the replica has no job function library")

	// Stalled: acknowledged by the master, never replicated.
	pausedAt := time.Now()
	require.NoError(t, replica.StallReplication())
	t.Cleanup(func() { _ = replica.Resume() })
	stalledAt := time.Now()
	grants(la, 10, false)
	lost, err := la.TryAcquire(ctx, lostKey, nil)
	require.NoError(t, err)
	release(lost)
	lostEnded := make(chan time.Time, 1)
	context.AfterFunc(lost.Context(), func() { lostEnded <- time.Now() })
	fences[lostKey].before = append(fences[lostKey].before, lost.Fence())
	time.Sleep(100 * time.Millisecond) // inserts, fetches and finishes, unreplicated

	require.NoError(t, master.Kill())
	killedAt, killedNow := time.Now(), lockcheck.Now()
	require.NoError(t, replica.Resume())
	t.Logf("the replica paused for %v, %v of it stalled", killedAt.Sub(pausedAt), killedAt.Sub(stalledAt))
	require.NoError(t, cluster.WaitFailover(replica, master))
	t.Logf("replica promoted %v after the kill", time.Since(killedAt))

	// B takes lostKey once its client reaches the new master: it was never
	// granted there.
	var taken *batonlock.Lease
	for taken == nil {
		actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
		taken, err = lb.TryAcquire(actx, lostKey, nil)
		acancel()
		require.Falsef(t, errors.Is(err, batonlock.ErrNotAcquired), "the unreplicated lease on %q survived the failover", lostKey)
		require.Lessf(t, time.Since(killedAt), 20*time.Second, "no grant on the new master 20s after the kill: %v", err)
	}
	takenAt := time.Now()
	release(taken)
	fences[lostKey].after = append(fences[lostKey].after, taken.Fence())
	t.Logf("B granted %q on the new master %v after the kill", lostKey, takenAt.Sub(killedAt))
	var lostEndedAt time.Time
	select {
	case lostEndedAt = <-lostEnded:
	case <-time.After(lockTTL):
		require.FailNow(t, "the old holder's lease on the lost grant did not end")
	}
	overlap := lostEndedAt.Sub(takenAt)
	t.Logf("A's lease on %q ended %v after B's grant (%v)", lostKey, overlap, lost.Err())
	require.Truef(t, errors.Is(lost.Err(), batonlock.ErrNotHeld) || errors.Is(lost.Err(), batonlock.ErrLeaseExpired), "cause %v", lost.Err())
	require.Less(t, overlap, heartbeat+150*time.Millisecond, "two holders for longer than a heartbeat interval")

	// keptKey was replicated: it stays held, confirmed by a heartbeat of
	// the new master.
	confirmed := killedAt.Add(lockTTL - lockTTL/100 - 2*time.Millisecond)
	require.Eventuallyf(t, func() bool { return kept.Until().After(confirmed) }, 2*heartbeat, 10*time.Millisecond,
		"no heartbeat of the replicated lease confirmed by the new master: %v", kept.Err())
	require.NoError(t, kept.Err())
	info, err := lb.Inspect(ctx, keptKey)
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, kept.Token(), info.Holders[0].Token)
	// B's wait: its grant channel's shard subscription drops with the
	// master, and the recheck the listener then asks for fails while the
	// master is down; it is made again while B's place may live (WaitTTL
	// after the last recheck that reached the backend), so B keeps its
	// place, replicated before the kill, and is granted the lock once it
	// is released, as behind a Sentinel. (Before rechecks were made again,
	// the wait ended in the failover in most runs.)
	select {
	case r := <-waiter:
		require.FailNowf(t, "B's wait ended in the failover", "%v", r.err)
	default:
		require.Equal(t, 1, info.WaiterCount, "B waits, but has no place")
	}
	require.NoError(t, kept.Release(ctx))
	select {
	case r := <-waiter:
		require.NoError(t, r.err, "B's wait")
		release(r.lease)
		fences[keptKey].after = append(fences[keptKey].after, r.lease.Fence())
		require.NoError(t, r.lease.Release(ctx))
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the waiter queued before the failover was not granted the lock released after it")
	}
	grants(la, 10, true)
	grants(lb, 10, true)
	var before, after []uint64
	for key, f := range fences {
		require.Greaterf(t, slices.Min(f.after), slices.Max(f.before), "%q: a fence after the failover is not above every fence before it", key)
		before, after = append(before, f.before...), append(after, f.after...)
	}
	require.Greater(t, slices.Min(after), slices.Max(before), "lock fences across keys")

	// Jobs: inserts go on against the new master; then stop.
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		last := w.inserts[len(w.inserts)-1]
		return last.sent.After(killedAt) && last.err == nil
	}, 20*time.Second, 20*time.Millisecond, "no insert succeeded after the kill")
	time.Sleep(300 * time.Millisecond)
	stopInserts()
	stopElsewhere()
	// Queues on the other masters: while the killed master is marked
	// failed and not yet replaced, every node refuses every command with
	// CLUSTERDOWN (cluster-require-full-coverage), which ran nothing; the
	// driver sends it again, so they wait the failover out.
	e := <-elsewhere
	t.Logf("inserts into a queue of another master: %d, the slowest %v; failed: %v", e.ok, e.slowest, e.failed)
	require.Empty(t, e.failed, "inserts into a queue of another master failed")
	w.mu.Lock()
	var replicated, unreplicated, afterKill []string
	failed := 0
	for _, in := range w.inserts {
		switch {
		case in.err != nil:
			failed++
		case in.returned.Before(syncedAt):
			replicated = append(replicated, in.id)
		case in.sent.After(stalledAt) && in.returned.Before(killedAt):
			unreplicated = append(unreplicated, in.id)
		case in.sent.After(killedAt):
			afterKill = append(afterKill, in.id)
		}
	}
	w.mu.Unlock()
	require.NotEmpty(t, replicated)
	require.NotEmpty(t, unreplicated)
	require.NotEmpty(t, afterKill)
	w.waitCompleted(append(replicated, afterKill...), 20*time.Second)
	gone := 0
	for _, id := range unreplicated {
		if _, err := w.clients[0].JobGet(ctx, clusterQueue, id); errors.Is(err, baton.ErrJobNotFound) {
			gone++
		}
	}
	t.Logf("jobs: %d replicated and %d inserted after the kill, all completed; %d acknowledged during the stall, %d gone; %d inserts failed",
		len(replicated), len(afterKill), len(unreplicated), gone, failed)
	require.Equal(t, len(unreplicated), gone, "an insert acknowledged during the stall is on the new master")

	// Runs: the dead master's, then the new one's.
	w.mu.Lock()
	defer w.mu.Unlock()
	var old, fresh []keycheck.Execution
	var maxOld, minFresh int64
	lateEnd, across := time.Duration(0), 0
	for _, r := range w.runs {
		e := keycheck.Execution{Job: r.job, Key: r.key, Fence: r.fence, Start: r.start, End: r.end, Lost: r.lost}
		if r.start < killedNow {
			old = append(old, e)
			maxOld = max(maxOld, r.fence)
			require.NotZero(t, r.end, "a run of the dead master never ended")
			lateEnd = max(lateEnd, time.Duration(r.end-killedNow))
			if r.end > killedNow {
				across++
			}
			continue
		}
		fresh = append(fresh, e)
		if minFresh == 0 || r.fence < minFresh {
			minFresh = r.fence
		}
	}
	require.NoError(t, keycheck.Check(old, clusterKeys), "runs on the dead master")
	require.NoError(t, keycheck.Check(fresh, clusterKeys), "runs on the new master")
	require.Greater(t, minFresh, maxOld, "a job fence on the new master is not above every fence before the kill")
	// A run across the kill ends when its lease, renewed no more, runs
	// out by the client's clock: within LeaseTTL of the kill.
	require.NotZero(t, across, "no run across the kill")
	require.Less(t, lateEnd, leaseTTL+150*time.Millisecond, "a run of the dead master outlived its lease")
	t.Logf("runs: %d before the kill, %d of them across it, the last ended %v after it; %d after, fences from %v of server time above the highest before",
		len(old), across, lateEnd, len(fresh), time.Duration(minFresh-maxOld)*time.Millisecond/1024)
	t.Logf("client warnings and errors: %v", w.log.counts())
}

package baton_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

	mu   sync.Mutex
	runs []*clusterRun
	last map[string]*clusterRun // job ID -> its latest run
	ids  []string               // acknowledged inserts, in order
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
	select {
	case <-time.After(time.Duration(2+rand.IntN(10)) * time.Millisecond):
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
	res, err := w.clients[n%len(w.clients)].Insert(ctx, keyedCrashArgs{Key: key, N: n}, &baton.InsertOpts{
		Queue: clusterQueue, MaxAttempts: 1000,
		Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }), Limit: 1},
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.failed[err.Error()]++
		return
	}
	w.ids = append(w.ids, res.Job.ID)
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
	// waiter behind it, both on the first client's driver.
	locker, err := batonlock.New(w.drivers[0], &batonlock.Config{TTL: time.Second, Logger: quiet})
	require.NoError(t, err)
	held, err := locker.TryAcquire(ctx, clusterQueue, nil)
	require.NoError(t, err)
	waiter := make(chan *batonlock.Lease, 1)
	go func() {
		ls, err := locker.Acquire(ctx, clusterQueue, nil)
		if err == nil {
			waiter <- ls
		}
		close(waiter)
	}()

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
	select {
	case ls := <-waiter:
		require.NotNil(t, ls, "the waiter's Acquire failed")
		require.Greater(t, ls.Fence(), held.Fence())
		require.NoError(t, ls.Release(ctx))
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

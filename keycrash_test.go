package baton_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The keyed crash test: worker processes on one Redis run jobs of many
// concurrency keys, limits 1 and 3, while one process at a time is killed
// with SIGKILL and restarted. Every execution logs its key, fence, start
// and end; afterwards the history must keep every key's limit and fence
// order (internal/keycheck), and every job must be completed. The checker's
// power is shown in batonredis, where it catches a broken promotion. Its
// Cluster variant runs the same on a 3-master Redis Cluster, the keys
// spread over three queues, one on each master.

type keyedCrashArgs struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func (keyedCrashArgs) Kind() string { return "keyed_crash" }

// keyedCrashKeys are the keys of the test and their limits.
var keyedCrashKeys = func() map[string]int {
	m := map[string]int{}
	for i := range 16 {
		m[fmt.Sprintf("k%02d", i)] = 1 + 2*(i%2) // limits 1 and 3
	}
	return m
}()

// keyedClusterQueues are the queues of the Cluster variant. Their hash
// tags fall in slots 3387, 7450 and 11641, one in each third of the slots,
// so on three masters of redistest's Cluster; the test checks where their
// keys are.
var keyedClusterQueues = []string{"q0", "q1", "q2"}

// keyedCrashQueues maps each key of keyedCrashKeys to its queue, one of
// queues: a concurrency key lives in one queue, so in one Cluster slot.
// Key kNN goes to queues[NN % len(queues)], so that each queue has keys of
// both limits.
func keyedCrashQueues(queues []string) map[string]string {
	m := map[string]string{}
	for i := range len(keyedCrashKeys) {
		m[fmt.Sprintf("k%02d", i)] = queues[i%len(queues)]
	}
	return m
}

func init() {
	children["keyworker"] = func() int { return runKeyedCrashWorker([]string{"default"}) }
	children["keyworkercluster"] = func() int { return runKeyedCrashWorker(keyedClusterQueues) }
}

// runKeyedCrashWorker works queues and logs "start ID QUEUE/KEY FENCE NOW
// PID" and "end ID QUEUE/KEY FENCE NOW PID" around each execution, with
// write(2), until killed.
func runKeyedCrashWorker(queues []string) int {
	d, f, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	var mu sync.Mutex
	pid := os.Getpid()
	logLine := func(what string, job *baton.Job[keyedCrashArgs]) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintf(f, "%s %s %s/%s %d %d %d\n", what, job.ID, job.Queue, job.Key, job.Fence, lockcheck.Now(), pid)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[keyedCrashArgs](func(ctx context.Context, job *baton.Job[keyedCrashArgs]) error {
		logLine("start", job)
		// A handler must stop when its context ends: a lease lost (its
		// heartbeat late, as under -race on a busy machine) ends the
		// context before the server lets the slot go.
		select {
		case <-time.After(time.Duration(5+rand.IntN(25)) * time.Millisecond):
		case <-ctx.Done():
		}
		logLine("end", job)
		if errors.Is(context.Cause(ctx), baton.ErrLeaseLost) {
			logLine("lost", job)
		}
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		Key:   baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }),
		Limit: 1, // the odd keys' limit 3 is stored with SetLimit
	}})
	cfg := &baton.Config{
		Workers: workers, Concurrency: 16, LeaseTTL: 600 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, Logger: quiet,
	}
	for _, q := range queues {
		cfg.Queues = append(cfg.Queues, baton.QueueConfig{Name: q})
	}
	if alsoEmptyQueue(pid) {
		// Half the processes also work an empty queue: they chain jobs
		// only while a worker is free, and hand no worker to the next job.
		cfg.Queues = append(cfg.Queues, baton.QueueConfig{Name: "other"})
	}
	c, err := baton.NewClient(d, cfg)
	return childServe(c, err)
}

// alsoEmptyQueue reports whether the keyed crash worker of process pid
// works the empty queue "other" besides its own.
func alsoEmptyQueue(pid int) bool { return pid%2 == 1 }

// keyedCrashClient is crashClient with the limits of keyedCrashKeys stored
// in their queues, one of queues (the workers' default limit is 1).
func keyedCrashClient(t *testing.T, addr string, queues []string) (*baton.Client, string) {
	t.Helper()
	c, prefix := crashClient(t, addr)
	for k, q := range keyedCrashQueues(queues) {
		if limit := keyedCrashKeys[k]; limit != 1 {
			_, err := c.SetLimit(t.Context(), q, k, limit)
			require.NoError(t, err)
		}
	}
	return c, prefix
}

func TestCrashKeyedWorkersKeepLimits(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 1500)
	srv := redistest.StartT(t, nil)
	crashKeyed(t, "keyworker", srv.Addr(), []string{"default"}, jobs, duration)
}

// TestCrashKeyedWorkersKeepLimitsCluster is the keyed crash test on a
// 3-master Cluster: the workers reach every master, the keys' queues
// (keyedClusterQueues) are on different masters.
func TestCrashKeyedWorkersKeepLimitsCluster(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 1500)
	cluster := redistest.StartClusterT(t)
	prefix := crashKeyed(t, "keyworkercluster", strings.Join(cluster.Addrs(), ","), keyedClusterQueues, jobs, duration)

	// Where each queue's keys are: a master answers EXISTS for the keys of
	// its own slots, MOVED for the others. A queue's meta hash is kept
	// forever, so it is there after the run.
	masters := map[string][]string{} // node address -> its queues
	for _, q := range keyedClusterQueues {
		meta := prefix + ":queue:{" + q + "}:meta"
		owner := ""
		for _, n := range cluster.Nodes() {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true})
			require.NoError(t, err)
			found, err := c.Do(t.Context(), c.B().Exists().Key(meta).Build()).AsInt64()
			c.Close()
			if err == nil && found == 1 {
				require.Empty(t, owner, "%s on two masters", meta)
				owner = n.Addr()
			}
		}
		require.NotEmpty(t, owner, "%s on no master", meta)
		masters[owner] = append(masters[owner], q)
	}
	require.GreaterOrEqual(t, len(masters), 2, "queues by master: %v", masters)
	t.Logf("%d masters used: %v", len(masters), masters)
}

// crashKeyed is the body of the keyed crash tests: jobs jobs of the keys of
// keyedCrashKeys, each in its queue (keyedCrashQueues), run by processes
// in role on Redis at addr, killed for duration. It returns the key prefix.
func crashKeyed(t *testing.T, role, addr string, queues []string, jobs int, duration time.Duration) string {
	logPath := filepath.Join(t.TempDir(), "executions.log")
	c, prefix := keyedCrashClient(t, addr, queues)
	ctx := context.Background()
	queueOf := keyedCrashQueues(queues)
	limits := map[string]int{} // QUEUE/KEY -> its limit, as the workers log keys
	for k, q := range queueOf {
		limits[q+"/"+k] = keyedCrashKeys[k]
	}
	var batch []*baton.InsertManyParams
	for i := range jobs {
		key := fmt.Sprintf("k%02d", rand.IntN(len(keyedCrashKeys)))
		batch = append(batch, &baton.InsertManyParams{
			Args: keyedCrashArgs{Key: key, N: i},
			Opts: &baton.InsertOpts{Queue: queueOf[key], MaxAttempts: 1000, Concurrency: &baton.ConcurrencyOpts{
				Key: baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }), Limit: 1,
			}},
		})
	}
	_, err := c.InsertMany(ctx, batch)
	require.NoError(t, err)
	done := func() bool {
		n := 0
		for _, q := range queues {
			stats, err := c.QueueStats(ctx, q)
			require.NoError(t, err)
			n += stats.Counts[baton.JobStateCompleted]
		}
		return n == jobs
	}
	procs := crashRun(t, role, addr, prefix, logPath, duration, done)
	execs, ids := readKeyedLog(t, logPath, procs)
	require.Len(t, ids, jobs, "every job ran")
	require.NoError(t, keycheck.Check(execs, limits))
	alsoEmpty := 0
	for _, p := range procs {
		if alsoEmptyQueue(p.pid) {
			alsoEmpty++
		}
	}
	t.Logf("%d executions of %d jobs on %d keys in queues %v by %d processes (%d also working an empty queue): no key over its limit, fences in order",
		len(execs), jobs, len(limits), queues, len(procs), alsoEmpty)
	return prefix
}

// readKeyedLog reads the executions logged by the worker processes; an
// execution cut off by a kill ends at its process's kill.
func readKeyedLog(t *testing.T, path string, procs []*crashProc) ([]keycheck.Execution, map[string]bool) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	killedAt := map[string]int64{} // pid -> lockcheck.Now of its kill
	for _, p := range procs {
		killedAt[strconv.Itoa(p.pid)] = p.killedAt
	}
	open := map[string]*keycheck.Execution{} // job ID + fence -> its execution
	lost := 0
	var execs []*keycheck.Execution
	ids := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 6 {
			continue // a line cut by a kill
		}
		fence, _ := strconv.ParseInt(fields[3], 10, 64)
		at, _ := strconv.ParseInt(fields[4], 10, 64)
		id := fields[1] + " " + fields[3]
		switch fields[0] {
		case "start":
			// Until its end is read: its process's kill, or never.
			e := &keycheck.Execution{Job: fields[1], Key: fields[2], Fence: fence, Start: at, End: killedAt[fields[5]]}
			open[id] = e
			execs = append(execs, e)
			ids[fields[1]] = true
		case "end":
			if e := open[id]; e != nil {
				e.End = at
			}
		case "lost":
			if e := open[id]; e != nil {
				e.Lost = true
			}
			lost++
		}
	}
	require.NoError(t, sc.Err())
	t.Logf("%d leases lost by live handlers (heartbeats late), each handler stopped by its context", lost)
	out := make([]keycheck.Execution, len(execs))
	for i, e := range execs {
		out[i] = *e
	}
	return out, ids
}

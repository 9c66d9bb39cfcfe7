package baton_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/jobcheck"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The keyed crash test: worker processes on one Redis run jobs of many
// concurrency keys, limits 1 and 3, while one process at a time is killed
// with SIGKILL and restarted. Every execution logs its key, fence, start
// and end, and the acknowledgement of its outcome (crashWorker's log, as
// the plain crash test's workers). Afterwards the history must keep every
// key's limit and fence order (internal/keycheck), every job must be
// completed, and every run of a job but its last must have been cut off
// by a kill or a lost lease before the next began (internal/jobcheck, as
// in the plain crash test). keycheck's power is shown in batonredis, where
// it catches a broken promotion; jobcheck's here, by
// TestBrokenKeyedFinishCaughtByCrashCheck. Its Cluster variant runs the
// same on a 3-master Redis Cluster, the keys spread over three queues, one
// on each master.

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
	children["keyworker"] = func() int { return runKeyedCrashWorker([]string{"default"}, false) }
	children["keyworkerbroken"] = func() int { return runKeyedCrashWorker([]string{"default"}, true) }
	children["keyworkercluster"] = func() int { return runKeyedCrashWorker(crashClusterQueues, false) }
}

// runKeyedCrashWorker works queues, logging its executions as crashWorker
// does, until killed (a mutant if broken; see crashWorker).
func runKeyedCrashWorker(queues []string, broken bool) int {
	d, w, err := newCrashWorker(broken)
	if err != nil {
		return childFailed(err)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[keyedCrashArgs](func(ctx context.Context, job *baton.Job[keyedCrashArgs]) error {
		// A lease lost (its heartbeat late, as under -race on a busy
		// machine) ends the context before the server lets the slot go.
		w.run(ctx, job.ID, job.Args.N, job.Attempt, job.Queue+"/"+job.Key, job.Fence, time.Duration(5+rand.IntN(25))*time.Millisecond)
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
	if alsoEmptyQueue(os.Getpid()) {
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
	execs, ids, _ := crashKeyed(t, "keyworker", srv.Addr(), []string{"default"}, jobs, duration)
	requireReruns(t, ids, execs)
}

// TestCrashKeyedWorkersKeepLimitsCluster is the keyed crash test on a
// 3-master Cluster: the workers reach every master, the keys' queues
// (crashClusterQueues) are on different masters. With its workers made
// mutants (runKeyedCrashWorker(crashClusterQueues, true), a one-off edit)
// keycheck passed and jobcheck failed, naming 60 jobs.
func TestCrashKeyedWorkersKeepLimitsCluster(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 1500)
	cluster := redistest.StartClusterT(t)
	execs, ids, prefix := crashKeyed(t, "keyworkercluster", strings.Join(cluster.Addrs(), ","), crashClusterQueues, jobs, duration)
	requireReruns(t, ids, execs)
	requireQueuesOnMasters(t, cluster, prefix, crashClusterQueues)
}

// TestBrokenKeyedFinishCaughtByCrashCheck is TestBrokenFinishCaughtByCrashCheck
// for keyed jobs: the keyed crash test's workload, 300 jobs, on mutant
// workers whose backend drops the outcome of the first attempt of every
// 25th job and reports it recorded (the same swallowingDriver). The job
// keeps its key's slot until its lease lapses and runs again, with a new
// fence: keycheck has nothing to object to, and did not before
// jobcheck was run on keyed histories too. jobcheck must name those jobs
// and no other.
func TestBrokenKeyedFinishCaughtByCrashCheck(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	execs, ids, _ := crashKeyedRun(t, "keyworkerbroken", srv.Addr(), []string{"default"}, 300, 2*time.Second)
	t.Logf("keycheck on the mutant's history: %v", keycheck.Check(keyedExecutions(execs), keyedCrashLimits([]string{"default"})))
	_, err := jobcheck.Check(ids, jobExecutions(execs))
	requireMutantCaught(t, ids, err)
}

// requireReruns requires every job of ids run, its last run recorded, and
// every rerun explained by a kill or a lost lease (jobcheck).
func requireReruns(t *testing.T, ids []string, execs []crashExecution) {
	t.Helper()
	counts, err := jobcheck.Check(ids, jobExecutions(execs))
	require.NoError(t, err)
	t.Logf("%d executions of %d jobs: %d runs cut off by a kill, %d by a lost lease, each before the next began",
		counts.Executions, counts.Jobs, counts.Killed, counts.Lost)
}

// keyedCrashLimits are the limits of keyedCrashKeys by QUEUE/KEY, as the
// workers log keys, each key in its queue, one of queues.
func keyedCrashLimits(queues []string) map[string]int {
	limits := map[string]int{}
	for k, q := range keyedCrashQueues(queues) {
		limits[q+"/"+k] = keyedCrashKeys[k]
	}
	return limits
}

// crashKeyed is the body of the keyed crash tests: crashKeyedRun, whose
// history must keep every key's limit and fence order (keycheck). It
// returns the executions, the jobs' IDs and the key prefix.
func crashKeyed(t *testing.T, role, addr string, queues []string, jobs int, duration time.Duration) ([]crashExecution, []string, string) {
	execs, ids, prefix := crashKeyedRun(t, role, addr, queues, jobs, duration)
	limits := keyedCrashLimits(queues)
	require.NoError(t, keycheck.Check(keyedExecutions(execs), limits))
	lost := 0
	for _, e := range execs {
		if e.Lost {
			lost++
		}
	}
	t.Logf("%d executions of %d jobs on %d keys in queues %v: no key over its limit, fences in order; %d leases lost by live runs (the handler stopped by its context, or its outcome found stale)",
		len(execs), jobs, len(limits), queues, lost)
	return execs, ids, prefix
}

// crashKeyedRun runs jobs jobs of the keys of keyedCrashKeys, each in its
// queue (keyedCrashQueues), by processes in role on Redis at addr, killed
// for duration. It returns the executions, the jobs' IDs in the order of
// their N, and the key prefix.
func crashKeyedRun(t *testing.T, role, addr string, queues []string, jobs int, duration time.Duration) ([]crashExecution, []string, string) {
	c, prefix := keyedCrashClient(t, addr, queues)
	queueOf := keyedCrashQueues(queues)
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
	res, err := c.InsertMany(t.Context(), batch)
	require.NoError(t, err)
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	procs := crashRun(t, role, addr, prefix, duration, completedIn(t, c, queues, jobs))
	alsoEmpty := 0
	for _, p := range procs {
		if alsoEmptyQueue(p.pid) {
			alsoEmpty++
		}
	}
	t.Logf("%d processes, %d of them also working an empty queue", len(procs), alsoEmpty)
	return readCrashLogs(t, procs), ids, prefix
}

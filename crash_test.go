package baton_test

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/jobcheck"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The crash test: worker processes on one Redis, one of them killed with
// SIGKILL at random intervals and restarted, while a few thousand jobs run.
// Afterwards every job must be completed, none lost, and every run of a
// job but its last must have been cut off — by a kill of its process
// before its outcome was recorded, or by the loss of its lease — before
// the next began (internal/jobcheck). TestBrokenFinishCaughtByCrashCheck
// shows the check catches a job run again for another reason. Its Cluster
// variant runs the same on a 3-master Redis Cluster, the jobs spread over
// three queues, one on each master. The keyed crash tests
// (keycrash_test.go) run their workers with the same harness: crashWorker
// and its log, crashRun, readCrashLogs.

type crashArgs struct {
	N int `json:"n"`
}

func (crashArgs) Kind() string { return "crash" }

// crashClusterQueues are the queues of the crash tests' Cluster variants.
// Their hash tags fall in slots 3387, 7450 and 11641, one in each third of
// the slots, so on three masters of redistest's Cluster; the tests check
// where their keys are (requireQueuesOnMasters).
var crashClusterQueues = []string{"q0", "q1", "q2"}

func init() {
	children["jobworker"] = func() int { return runCrashWorker([]string{"default"}, false) }
	children["jobworkerbroken"] = func() int { return runCrashWorker([]string{"default"}, true) }
	children["jobworkercluster"] = func() int { return runCrashWorker(crashClusterQueues, false) }
}

// crashWorker is what the crash tests' worker processes share, whatever
// their jobs: the log of their executions, and the mutant's backend.
//
// Each process logs to a file of its own, which crashRun names, with
// write(2) so that a SIGKILL loses nothing already logged, and with
// lockcheck.Now as NOW:
//
//	start SEQ ID KEY FENCE NOW   as a handler starts (SEQ counts the
//	                             process's runs; KEY is QUEUE/KEY, or "-"
//	                             and FENCE 0 for a job without a key)
//	end SEQ NOW ok               as it returns
//	end SEQ NOW lost             as it returns, its lease lost (ErrLeaseLost)
//	recorded ID NOW              as the backend acknowledges its outcome
//	stale ID NOW                 as the backend finds its outcome stale
//
// No line names its process: the file does. A process's PID would not do,
// since a worker started after a kill may get the PID of a killed one (the
// kernel hands PIDs out again, sooner on a busy machine), and its runs
// would then be taken for the killed one's: their kill time, and the
// acknowledgements of its outcomes, given to the wrong run.
type crashWorker struct {
	mu  sync.Mutex
	f   *os.File
	seq atomic.Int64
	// broken makes the process a mutant: the first attempt of every 25th
	// job (its N) has its outcome acknowledged but never sent, so the job
	// runs again though its process lives on.
	broken  bool
	swallow sync.Map // job IDs whose next outcome the mutant drops
}

// newCrashWorker is the start of a worker process: its Redis driver,
// wrapped to log the acknowledgements of outcomes (and, if broken, to drop
// some), and its log.
func newCrashWorker(broken bool) (batondriver.JobDriver, *crashWorker, error) {
	d, f, err := childSetup()
	if err != nil {
		return nil, nil, err
	}
	w := &crashWorker{f: f, broken: broken}
	var drv batondriver.JobDriver = d
	if broken {
		drv = swallowingDriver{drv, &w.swallow}
	}
	return acknowledgingDriver{drv, func(what, id string) { w.log("%s %s %d\n", what, id, lockcheck.Now()) }}, w, nil
}

func (w *crashWorker) log(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = fmt.Fprintf(w.f, format, args...)
}

// run is a handler's execution of attempt attempt of job id, the nth of
// the test, of key ("" for none) under fence: it logs its start, works
// for d or until ctx ends, and logs its end.
func (w *crashWorker) run(ctx context.Context, id string, n, attempt int, key string, fence int64, d time.Duration) {
	if key == "" {
		key = "-"
	}
	seq := w.seq.Add(1)
	w.log("start %d %s %s %d %d\n", seq, id, key, fence, lockcheck.Now())
	// A handler must stop when its context ends: its lease lost (a
	// heartbeat late, as under -race on a busy machine), the job runs
	// again once the server lets the lease go.
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
	how := "ok"
	if errors.Is(context.Cause(ctx), baton.ErrLeaseLost) {
		how = "lost"
	}
	w.log("end %d %d %s\n", seq, lockcheck.Now(), how)
	if w.broken && n%25 == 0 && attempt == 1 {
		w.swallow.Store(id, true)
	}
}

// runCrashWorker is a worker process of plain jobs in queues that works
// until killed (a mutant if broken; see crashWorker).
func runCrashWorker(queues []string, broken bool) int {
	d, w, err := newCrashWorker(broken)
	if err != nil {
		return childFailed(err)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[crashArgs](func(ctx context.Context, job *baton.Job[crashArgs]) error {
		w.run(ctx, job.ID, job.Args.N, job.Attempt, "", 0, time.Duration(20+rand.IntN(60))*time.Millisecond)
		return nil
	}), nil)
	cfg := &baton.Config{
		Workers: workers, Concurrency: 16, LeaseTTL: 600 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, Logger: quiet,
	}
	for _, q := range queues {
		cfg.Queues = append(cfg.Queues, baton.QueueConfig{Name: q})
	}
	c, err := baton.NewClient(d, cfg)
	return childServe(c, err)
}

// acknowledgingDriver tells log of every outcome its backend acknowledged:
// "recorded", or "stale" if the job's lease was no longer held.
type acknowledgingDriver struct {
	batondriver.JobDriver
	log func(what, id string)
}

func (d acknowledgingDriver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	res, err := d.JobDriver.JobFinish(ctx, p)
	if err != nil {
		return res, err
	}
	stale := map[string]bool{}
	for _, id := range res.Stale {
		stale[id] = true
	}
	for _, f := range p.Finished {
		if f.GiveBack {
			// A job chained behind another and given back unrun (as a
			// busy pool gives it back): no run's outcome.
			continue
		}
		if stale[f.ID] {
			d.log("stale", f.ID)
		} else {
			d.log("recorded", f.ID)
		}
	}
	return res, nil
}

// swallowingDriver is the mutant's backend: it drops the outcomes of the
// jobs in swallow, once each, and reports them recorded. The dropped
// outcome's lease, no longer renewed, lapses and the job runs again.
type swallowingDriver struct {
	batondriver.JobDriver
	swallow *sync.Map
}

func (d swallowingDriver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	q := *p
	q.Finished = nil
	for _, f := range p.Finished {
		if _, drop := d.swallow.LoadAndDelete(f.ID); !drop {
			q.Finished = append(q.Finished, f)
		}
	}
	if len(q.Finished) == 0 && q.Fetch == nil {
		return &batondriver.JobFinishResult{}, nil
	}
	return d.JobDriver.JobFinish(ctx, &q)
}

type crashProc struct {
	n           int // its number, from 1 in start order
	cmd         *exec.Cmd
	pid         int
	log         string // the file it logs to
	signalledAt int64  // lockcheck.Now once SIGKILL was sent; 0 while alive
	killedAt    int64  // lockcheck.Now once it was dead
}

// crashRun runs three worker processes in role on Redis at addr (a
// Cluster's node addresses comma-separated) under prefix, each logging to
// a file of its own, and kills one at random every 200-600ms until killFor
// has passed, restarting it, until done reports true (or fails the test
// after killFor + 40s). It returns every process started.
func crashRun(t *testing.T, role, addr, prefix string, killFor time.Duration, done func() bool) []*crashProc {
	dir := t.TempDir()
	var procs []*crashProc
	spawn := func() *crashProc {
		p := &crashProc{n: len(procs) + 1}
		p.log = filepath.Join(dir, fmt.Sprintf("process%03d.log", p.n))
		p.cmd = startChild(t, role, addr, prefix, p.log)
		p.pid = p.cmd.Process.Pid
		procs = append(procs, p)
		return p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.signalledAt == 0 {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	})
	alive := []*crashProc{spawn(), spawn(), spawn()}
	deadline := time.Now().Add(killFor + 40*time.Second)
	killUntil := time.Now().Add(killFor)
	kills := 0
	var teardown time.Duration // the longest from a kill's signal to its reaping
	for !done() {
		require.True(t, time.Now().Before(deadline), "jobs not all done in time")
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		if time.Now().Before(killUntil) {
			i := rand.IntN(len(alive))
			victim := alive[i]
			require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
			// Read once the signal is sent, not before: the process may
			// log a start in between, and runs no code after it.
			victim.signalledAt = lockcheck.Now()
			_ = victim.cmd.Wait()
			// And once it is dead: it logged nothing after this.
			victim.killedAt = lockcheck.Now()
			teardown = max(teardown, time.Duration(victim.killedAt-victim.signalledAt))
			kills++
			alive[i] = spawn()
		}
	}
	t.Logf("%d kills, the longest %v from the signal to the process reaped", kills, teardown)
	return procs
}

// crashJobs is the size of a crash test: BATON_CRASH_JOBS lengthens the
// run (make chaos).
func crashJobs(t *testing.T, jobs int) (int, time.Duration) {
	if v := os.Getenv("BATON_CRASH_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "BATON_CRASH_JOBS")
		return n, time.Duration(n/100) * time.Second
	}
	return jobs, time.Duration(jobs/150) * time.Second
}

// crashClient is a client on a fresh prefix of Redis at addr (as
// crashRun's), for the test's inserts and checks.
func crashClient(t *testing.T, addr string) (*baton.Client, string) {
	prefix := fmt.Sprintf("crash%d", time.Now().UnixNano())
	c, err := baton.NewClient(redisDriver(t, addr, prefix), &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	require.NoError(t, err)
	return c, prefix
}

// completed reports whether the default queue holds n completed jobs.
func completed(t *testing.T, c *baton.Client, n int) func() bool {
	return completedIn(t, c, []string{"default"}, n)
}

// completedIn reports whether queues hold n completed jobs in all.
func completedIn(t *testing.T, c *baton.Client, queues []string, n int) func() bool {
	return func() bool {
		done := 0
		for _, q := range queues {
			stats, err := c.QueueStats(context.Background(), q)
			require.NoError(t, err)
			done += stats.Counts[baton.JobStateCompleted]
		}
		return done == n
	}
}

func TestCrashWorkersLoseNoJob(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 3000)
	srv := redistest.StartT(t, nil)
	crashPlain(t, "jobworker", srv.Addr(), []string{"default"}, jobs, duration)
}

// TestCrashWorkersLoseNoJobCluster is the crash test on a 3-master
// Cluster: the workers reach every master, the jobs' queues
// (crashClusterQueues) are on different masters. With its workers made
// mutants (runCrashWorker(crashClusterQueues, true), a one-off edit) it
// failed, jobcheck naming 59 of the 60 jobs the mutant may break.
func TestCrashWorkersLoseNoJobCluster(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 1500)
	cluster := redistest.StartClusterT(t)
	prefix := crashPlain(t, "jobworkercluster", strings.Join(cluster.Addrs(), ","), crashClusterQueues, jobs, duration)
	requireQueuesOnMasters(t, cluster, prefix, crashClusterQueues)
}

// crashPlain is the body of the crash tests: jobs jobs spread over queues,
// run by processes in role on Redis at addr, killed for duration; their
// history must pass jobcheck. It returns the key prefix.
func crashPlain(t *testing.T, role, addr string, queues []string, jobs int, duration time.Duration) string {
	c, prefix := crashClient(t, addr)
	ids := insertCrashJobs(t, c, queues, jobs)
	procs := crashRun(t, role, addr, prefix, duration, completedIn(t, c, queues, jobs))
	counts, err := jobcheck.Check(ids, jobExecutions(readCrashLogs(t, procs)))
	require.NoError(t, err)
	t.Logf("%d executions of %d jobs in queues %v by %d processes: %d runs cut off by a kill, %d by a lost lease, each before the next began",
		counts.Executions, counts.Jobs, queues, len(procs), counts.Killed, counts.Lost)
	return prefix
}

// TestBrokenFinishCaughtByCrashCheck runs the crash test's workload on
// mutant workers whose backend drops the outcome of the first attempt of
// every 25th job and reports it recorded: the job runs again, though no
// kill or lost lease cut the run before off. The check must name those
// jobs and no other. (The crash test's check before jobcheck passed such a
// history whenever the process was killed later, as all but three are.)
func TestBrokenFinishCaughtByCrashCheck(t *testing.T) {
	t.Parallel()
	const jobs = 300
	srv := redistest.StartT(t, nil)
	c, prefix := crashClient(t, srv.Addr())
	queues := []string{"default"}
	ids := insertCrashJobs(t, c, queues, jobs)
	procs := crashRun(t, "jobworkerbroken", srv.Addr(), prefix, 2*time.Second, completedIn(t, c, queues, jobs))
	_, err := jobcheck.Check(ids, jobExecutions(readCrashLogs(t, procs)))
	requireMutantCaught(t, ids, err)
}

// requireMutantCaught requires err to be jobcheck's verdict on a mutant's
// history (crashWorker.broken) that names only jobs the mutant broke: of
// ids, the IDs of the jobs in order of their N, every 25th.
func requireMutantCaught(t *testing.T, ids []string, err error) {
	t.Helper()
	var bad *jobcheck.Error
	require.True(t, errors.As(err, &bad), "the mutant's history passed the check: %v", err)
	n := map[string]int{}
	for i, id := range ids {
		n[id] = i
	}
	for _, id := range bad.Jobs {
		require.Zero(t, n[id]%25, "job %d is not one the mutant broke: %v", n[id], err)
	}
	t.Logf("%d of the %d jobs the mutant may break caught; first: %s", len(bad.Jobs), (len(ids)+24)/25, bad.Violations[0])
}

// insertCrashJobs inserts jobs crash jobs, numbered from 0, job N in
// queues[N % len(queues)], and returns their IDs in that order.
func insertCrashJobs(t *testing.T, c *baton.Client, queues []string, jobs int) []string {
	var batch []*baton.InsertManyParams
	for i := range jobs {
		batch = append(batch, &baton.InsertManyParams{Args: crashArgs{N: i}, Opts: &baton.InsertOpts{Queue: queues[i%len(queues)], MaxAttempts: 1000}})
	}
	res, err := c.InsertMany(t.Context(), batch)
	require.NoError(t, err)
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// requireQueuesOnMasters requires the keys of queues under prefix on at
// least two of cluster's masters, and logs which. A master answers EXISTS
// for the keys of its own slots, MOVED for the others; a queue's set of
// completed jobs is kept for the workers' CompletedRetention, 24h, so it
// is there after a run (its meta hash, kept forever, may be empty: a
// queue of jobs without a key holds no fence there).
func requireQueuesOnMasters(t *testing.T, cluster *redistest.Cluster, prefix string, queues []string) {
	t.Helper()
	masters := map[string][]string{} // node address -> its queues
	for _, q := range queues {
		key := prefix + ":queue:{" + q + "}:completed"
		owner := ""
		for _, n := range cluster.Nodes() {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true})
			require.NoError(t, err)
			found, err := c.Do(t.Context(), c.B().Exists().Key(key).Build()).AsInt64()
			c.Close()
			if err == nil && found == 1 {
				require.Empty(t, owner, "%s on two masters", key)
				owner = n.Addr()
			}
		}
		require.NotEmpty(t, owner, "%s on no master", key)
		masters[owner] = append(masters[owner], q)
	}
	require.GreaterOrEqual(t, len(masters), 2, "queues by master: %v", masters)
	t.Logf("%d masters used: %v", len(masters), masters)
}

// crashExecution is one run logged by a crashWorker: what jobcheck needs
// to explain its job's reruns, and for a keyed job its key and fence, as
// keycheck needs them.
type crashExecution struct {
	jobcheck.Execution
	Key   string // QUEUE/KEY; "" for a job without a key
	Fence int64
}

// jobExecutions is what jobcheck takes of execs.
func jobExecutions(execs []crashExecution) []jobcheck.Execution {
	out := make([]jobcheck.Execution, len(execs))
	for i, e := range execs {
		out[i] = e.Execution
	}
	return out
}

// keyedExecutions is what keycheck takes of execs: a run its process's
// kill cut off before it returned ends as the signal was sent (see
// jobcheck.Execution.Signalled). (Lost, which only
// keycheck's messages read, also marks a run whose outcome was found
// stale after its handler returned.)
func keyedExecutions(execs []crashExecution) []keycheck.Execution {
	out := make([]keycheck.Execution, len(execs))
	for i, e := range execs {
		out[i] = keycheck.Execution{Job: e.Job, Key: e.Key, Fence: e.Fence, Start: e.Start, End: cmp.Or(e.End, e.Signalled, e.Killed), Lost: e.Lost}
	}
	return out
}

// readCrashLogs reads the executions that the crashWorkers of procs
// logged, in the order of procs, each with the kill time of its process:
// the process whose file it is in.
func readCrashLogs(t *testing.T, procs []*crashProc) []crashExecution {
	var out []crashExecution
	for _, p := range procs {
		out = append(out, readCrashLog(t, p)...)
	}
	return out
}

// readCrashLog reads the executions logged by the process p.
func readCrashLog(t *testing.T, p *crashProc) []crashExecution {
	f, err := os.Open(p.log)
	require.NoError(t, err)
	defer f.Close()
	var execs []*crashExecution
	bySeq := map[string]*crashExecution{} // SEQ -> its execution
	// Job ID -> its runs that returned with their leases, their outcomes
	// not acknowledged yet, oldest first: a process runs a job again only
	// after its lease lapsed, so its outcome before is acknowledged first,
	// whatever the order of the replies of calls seconds apart.
	awaiting := map[string][]*crashExecution{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		var err error
		switch {
		case len(fields) == 6 && fields[0] == "start":
			e := &crashExecution{Execution: jobcheck.Execution{Job: fields[2], Process: p.n, Signalled: p.signalledAt, Killed: p.killedAt}}
			if fields[3] != "-" {
				e.Key = fields[3]
			}
			e.Fence, err = strconv.ParseInt(fields[4], 10, 64)
			if err == nil {
				e.Start, err = strconv.ParseInt(fields[5], 10, 64)
			}
			execs = append(execs, e)
			bySeq[fields[1]] = e
		case len(fields) == 4 && fields[0] == "end":
			e := bySeq[fields[1]]
			require.NotNil(t, e, "%s: an end without its start: %q", p.log, line)
			e.End, err = strconv.ParseInt(fields[2], 10, 64)
			if e.Lost = fields[3] == "lost"; !e.Lost {
				awaiting[e.Job] = append(awaiting[e.Job], e)
			}
		case len(fields) == 3 && (fields[0] == "recorded" || fields[0] == "stale"):
			require.NotEmpty(t, awaiting[fields[1]], "%s: an outcome of no run: %q", p.log, line)
			e := awaiting[fields[1]][0]
			awaiting[fields[1]] = awaiting[fields[1]][1:]
			e.Recorded = fields[0] == "recorded"
			e.Lost = fields[0] == "stale"
		default:
			// Only the last line of a killed process can be cut short,
			// and a line is one write(2): none has been seen cut.
			t.Logf("%s: line not understood, skipped: %q", p.log, line)
		}
		require.NoError(t, err, "%s: line %q", p.log, line)
	}
	require.NoError(t, sc.Err())
	out := make([]crashExecution, len(execs))
	for i, e := range execs {
		out[i] = *e
	}
	return out
}

// TestCrashLogsOfOnePID reads the logs of two worker processes that had one
// PID, as a worker started after a kill may get the killed one's. The
// first was killed after its run of job j returned but before its outcome
// was acknowledged, and while it ran job k; the second ran both again.
// Each run must get its own process's kill time and acknowledgement, and
// the history pass jobcheck and keycheck. Taking a run's kill time by PID
// instead (a one-off edit of readCrashLog: the kill time of the last
// process of its PID) failed it: j's first run then ended in a process
// never killed, and k's never ended.
func TestCrashLogsOfOnePID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	procs := []*crashProc{
		{n: 1, pid: 4242, log: filepath.Join(dir, "1.log"), signalledAt: 990, killedAt: 1000},
		{n: 2, pid: 4242, log: filepath.Join(dir, "2.log")},
	}
	require.NoError(t, os.WriteFile(procs[0].log, []byte(
		"start 1 j - 0 100\nend 1 200 ok\nstart 2 k default/k01 5 300\n"), 0o644))
	require.NoError(t, os.WriteFile(procs[1].log, []byte(
		"start 1 j - 0 1100\nend 1 1200 ok\nrecorded j 1250\n"+
			"start 2 k default/k01 6 1300\nend 2 1400 ok\nrecorded k 1450\n"), 0o644))
	execs := readCrashLogs(t, procs)
	require.Len(t, execs, 4)
	counts, err := jobcheck.Check([]string{"j", "k"}, jobExecutions(execs))
	require.NoError(t, err)
	require.Equal(t, 2, counts.Killed)
	var keyed []crashExecution
	for _, e := range execs {
		if e.Key != "" {
			keyed = append(keyed, e)
		}
	}
	require.NoError(t, keycheck.Check(keyedExecutions(keyed), map[string]int{"default/k01": 1}))
}

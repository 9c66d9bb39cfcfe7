package baton_test

import (
	"bufio"
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

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/jobcheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The crash test: worker processes on one Redis, one of them killed with
// SIGKILL at random intervals and restarted, while a few thousand jobs run.
// Afterwards every job must be completed, none lost, and every run of a
// job but its last must have been cut off — by a kill of its process
// before its outcome was recorded, or by the loss of its lease — before
// the next began (internal/jobcheck). TestBrokenFinishCaughtByCrashCheck
// shows the check catches a job run again for another reason.

type crashArgs struct {
	N int `json:"n"`
}

func (crashArgs) Kind() string { return "crash" }

func init() {
	children["jobworker"] = func() int { return runCrashWorker(false) }
	children["jobworkerbroken"] = func() int { return runCrashWorker(true) }
}

// runCrashWorker is a worker process that works until killed. It logs to
// its own log, with write(2) so that a SIGKILL loses nothing already
// logged, and with lockcheck.Now as NOW:
//
//	start SEQ ID PID NOW       as a handler starts (SEQ counts its runs)
//	end SEQ ID PID NOW ok      as it returns
//	end SEQ ID PID NOW lost    as it returns, its lease lost (ErrLeaseLost)
//	recorded ID PID NOW        as the backend acknowledges its outcome
//	stale ID PID NOW           as the backend finds its outcome stale
//
// broken makes it a mutant: the first attempt of every 25th job has its
// outcome acknowledged but never sent, so the job runs again though its
// process lives on.
func runCrashWorker(broken bool) int {
	d, f, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	pid := os.Getpid()
	var mu sync.Mutex
	logLine := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintf(f, format, args...)
	}
	var seq atomic.Int64
	var swallow sync.Map // job IDs whose next outcome the mutant drops
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[crashArgs](func(ctx context.Context, job *baton.Job[crashArgs]) error {
		n := seq.Add(1)
		logLine("start %d %s %d %d\n", n, job.ID, pid, lockcheck.Now())
		// A handler must stop when its context ends: its lease lost (a
		// heartbeat late, as under -race on a busy machine), the job runs
		// again once the server lets the lease go.
		select {
		case <-time.After(time.Duration(20+rand.IntN(60)) * time.Millisecond):
		case <-ctx.Done():
		}
		how := "ok"
		if errors.Is(context.Cause(ctx), baton.ErrLeaseLost) {
			how = "lost"
		}
		logLine("end %d %s %d %d %s\n", n, job.ID, pid, lockcheck.Now(), how)
		if broken && job.Args.N%25 == 0 && job.Attempt == 1 {
			swallow.Store(job.ID, true)
		}
		return nil
	}), nil)
	var drv batondriver.JobDriver = d
	if broken {
		drv = swallowingDriver{drv, &swallow}
	}
	drv = acknowledgingDriver{drv, func(what, id string) { logLine("%s %s %d %d\n", what, id, pid, lockcheck.Now()) }}
	c, err := baton.NewClient(drv, &baton.Config{
		Workers: workers, Concurrency: 16, LeaseTTL: 600 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, Logger: quiet,
	})
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
	cmd       *exec.Cmd
	pid       int
	startedAt int64 // lockcheck.Now just before it was started
	killSent  int64 // lockcheck.Now just before SIGKILL was sent; 0 while alive
	killedAt  int64 // lockcheck.Now once it was dead
}

// crashRun runs three worker processes in role on Redis at addr (a
// Cluster's node addresses comma-separated) under prefix, logging
// to logPath, and kills one at random every 200-600ms until killFor has
// passed, restarting it, until done reports true (or fails the test after
// killFor + 40s). It returns every process started.
func crashRun(t *testing.T, role, addr, prefix, logPath string,
	killFor time.Duration, done func() bool) []*crashProc {
	var procs []*crashProc
	spawn := func() *crashProc {
		startedAt := lockcheck.Now()
		cmd := startChild(t, role, addr, prefix, logPath)
		p := &crashProc{cmd: cmd, pid: cmd.Process.Pid, startedAt: startedAt}
		procs = append(procs, p)
		return p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.killSent == 0 {
				_ = p.cmd.Process.Kill()
				_ = p.cmd.Wait()
			}
		}
	})
	alive := []*crashProc{spawn(), spawn(), spawn()}
	deadline := time.Now().Add(killFor + 40*time.Second)
	killUntil := time.Now().Add(killFor)
	kills := 0
	for !done() {
		require.True(t, time.Now().Before(deadline), "jobs not all done in time")
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		if time.Now().Before(killUntil) {
			i := rand.IntN(len(alive))
			victim := alive[i]
			victim.killSent = lockcheck.Now()
			require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
			_ = victim.cmd.Wait()
			// Read once it is dead: it logged nothing after this.
			victim.killedAt = lockcheck.Now()
			kills++
			alive[i] = spawn()
		}
	}
	t.Logf("%d kills", kills)
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
	return func() bool {
		stats, err := c.QueueStats(context.Background(), "default")
		require.NoError(t, err)
		return stats.Counts[baton.JobStateCompleted] == n
	}
}

func TestCrashWorkersLoseNoJob(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 3000)
	srv := redistest.StartT(t, nil)
	logPath := filepath.Join(t.TempDir(), "executions.log")
	c, prefix := crashClient(t, srv.Addr())
	ids := insertCrashJobs(t, c, jobs)
	procs := crashRun(t, "jobworker", srv.Addr(), prefix, logPath, duration, completed(t, c, jobs))
	counts, err := jobcheck.Check(ids, readCrashLog(t, logPath, procs))
	require.NoError(t, err)
	t.Logf("%d executions of %d jobs: %d runs cut off by a kill, %d by a lost lease, each before the next began",
		counts.Executions, counts.Jobs, counts.Killed, counts.Lost)
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
	logPath := filepath.Join(t.TempDir(), "executions.log")
	c, prefix := crashClient(t, srv.Addr())
	ids := insertCrashJobs(t, c, jobs)
	procs := crashRun(t, "jobworkerbroken", srv.Addr(), prefix, logPath, 2*time.Second, completed(t, c, jobs))
	_, err := jobcheck.Check(ids, readCrashLog(t, logPath, procs))
	var bad *jobcheck.Error
	require.True(t, errors.As(err, &bad), "the mutant's history passed the check: %v", err)
	n := map[string]int{}
	for i, id := range ids {
		n[id] = i
	}
	for _, id := range bad.Jobs {
		require.Zero(t, n[id]%25, "job %d is not one the mutant broke: %v", n[id], err)
	}
	t.Logf("%d of the %d jobs the mutant may break caught; first: %s", len(bad.Jobs), jobs/25, bad.Violations[0])
}

// insertCrashJobs inserts jobs crash jobs, numbered from 0, and returns
// their IDs in that order.
func insertCrashJobs(t *testing.T, c *baton.Client, jobs int) []string {
	var batch []*baton.InsertManyParams
	for i := range jobs {
		batch = append(batch, &baton.InsertManyParams{Args: crashArgs{N: i}, Opts: &baton.InsertOpts{MaxAttempts: 1000}})
	}
	res, err := c.InsertMany(t.Context(), batch)
	require.NoError(t, err)
	ids := make([]string, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// readCrashLog reads the executions that runCrashWorker processes logged,
// each with the kill time of the process that ran it: of the processes
// with its PID, the last one started before it (a PID may come back).
func readCrashLog(t *testing.T, path string, procs []*crashProc) []jobcheck.Execution {
	byPID := map[int][]*crashProc{} // in start order
	for _, p := range procs {
		byPID[p.pid] = append(byPID[p.pid], p)
	}
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var execs []*jobcheck.Execution
	bySeq := map[string]*jobcheck.Execution{} // PID + SEQ -> its execution
	// PID + job ID -> its runs that returned with their leases, their
	// outcomes not acknowledged yet, oldest first: a process runs a job
	// again only after its lease lapsed, so its outcome before is
	// acknowledged first, whatever the order of the replies of calls
	// seconds apart.
	awaiting := map[string][]*jobcheck.Execution{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		var err error
		switch {
		case len(fields) == 5 && fields[0] == "start":
			var pid int
			e := &jobcheck.Execution{Job: fields[2]}
			pid, err = strconv.Atoi(fields[3])
			if err == nil {
				e.Start, err = strconv.ParseInt(fields[4], 10, 64)
			}
			if err != nil {
				break
			}
			e.Process = pid
			for _, p := range byPID[pid] {
				if p.startedAt < e.Start {
					e.Killed = p.killedAt
				}
			}
			execs = append(execs, e)
			bySeq[fields[3]+" "+fields[1]] = e
		case len(fields) == 6 && fields[0] == "end":
			e := bySeq[fields[3]+" "+fields[1]]
			require.NotNil(t, e, "an end without its start: %q", line)
			e.End, err = strconv.ParseInt(fields[4], 10, 64)
			if e.Lost = fields[5] == "lost"; !e.Lost {
				k := fields[3] + " " + fields[2]
				awaiting[k] = append(awaiting[k], e)
			}
		case len(fields) == 4 && (fields[0] == "recorded" || fields[0] == "stale"):
			k := fields[2] + " " + fields[1]
			require.NotEmpty(t, awaiting[k], "an outcome of no run: %q", line)
			e := awaiting[k][0]
			awaiting[k] = awaiting[k][1:]
			e.Recorded = fields[0] == "recorded"
			e.Lost = fields[0] == "stale"
		default:
			// Only the last line of a killed process can be cut short,
			// and a line is one write(2): none has been seen cut.
			t.Logf("line not understood, skipped: %q", line)
		}
		require.NoError(t, err, "line %q", line)
	}
	require.NoError(t, sc.Err())
	out := make([]jobcheck.Execution, len(execs))
	for i, e := range execs {
		out[i] = *e
	}
	return out
}

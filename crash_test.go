package baton_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The crash test: worker processes on one Redis, one of them killed with
// SIGKILL at random intervals and restarted, while a few thousand jobs run.
// Afterwards every job must be completed, none lost, and every execution
// but a job's last must have been cut off by a kill.

type crashArgs struct {
	N int `json:"n"`
}

func (crashArgs) Kind() string { return "crash" }

func init() { children["jobworker"] = runCrashWorker }

// runCrashWorker is a worker process: it logs "start ID PID" before and
// "end ID PID" after each execution to its own log, with write(2) so that a
// SIGKILL loses nothing already logged, and works until killed.
func runCrashWorker() int {
	d, f, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	pid := os.Getpid()
	var mu sync.Mutex
	logLine := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = f.WriteString(s)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[crashArgs](func(ctx context.Context, job *baton.Job[crashArgs]) error {
		logLine(fmt.Sprintf("start %s %d\n", job.ID, pid))
		time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
		logLine(fmt.Sprintf("end %s %d\n", job.ID, pid))
		return nil
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{
		Workers: workers, Concurrency: 16, LeaseTTL: 600 * time.Millisecond,
		PollInterval: 200 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	select {} // until killed
}

type crashProc struct {
	cmd      *exec.Cmd
	pid      int
	killed   time.Time // zero while alive
	killedAt int64     // lockcheck.Now just after the kill
}

// crashRun runs three worker processes in role on srv under prefix, logging
// to logPath, and kills one at random every 200-600ms until killFor has
// passed, restarting it, until done reports true (or fails the test after
// killFor + 40s). It returns every process started.
func crashRun(t *testing.T, role string, srv *redistest.Server, prefix, logPath string,
	killFor time.Duration, done func() bool) []*crashProc {
	var procs []*crashProc
	spawn := func() *crashProc {
		cmd := startChild(t, role, srv.Addr(), prefix, logPath)
		p := &crashProc{cmd: cmd, pid: cmd.Process.Pid}
		procs = append(procs, p)
		return p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			if p.killed.IsZero() {
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
			victim.killed = time.Now()
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

// crashClient is a client on a fresh prefix of srv, for the test's inserts
// and checks.
func crashClient(t *testing.T, srv *redistest.Server) (*baton.Client, string) {
	prefix := fmt.Sprintf("crash%d", time.Now().UnixNano())
	c, err := baton.NewClient(redisDriver(t, srv.Addr(), prefix), &baton.Config{AllowUnknownKinds: true, Logger: quiet})
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
	c, prefix := crashClient(t, srv)
	ctx := context.Background()
	var batch []*baton.InsertManyParams
	for i := range jobs {
		batch = append(batch, &baton.InsertManyParams{Args: crashArgs{N: i}, Opts: &baton.InsertOpts{MaxAttempts: 1000}})
	}
	_, err := c.InsertMany(ctx, batch)
	require.NoError(t, err)
	procs := crashRun(t, "jobworker", srv, prefix, logPath, duration, completed(t, c, jobs))
	t.Logf("%d jobs completed", jobs)

	// Every execution but a job's last must have been in a process killed
	// after it started.
	killedAt := map[int]time.Time{}
	for _, p := range procs {
		if !p.killed.IsZero() {
			killedAt[p.pid] = p.killed
		}
	}
	type exec struct {
		pid   int
		ended bool
	}
	runs := map[string][]*exec{}
	f, err := os.Open(logPath)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue // a line cut by a kill
		}
		pid, _ := strconv.Atoi(fields[2])
		switch fields[0] {
		case "start":
			runs[fields[1]] = append(runs[fields[1]], &exec{pid: pid})
		case "end":
			for _, e := range runs[fields[1]] {
				if e.pid == pid {
					e.ended = true
				}
			}
		}
	}
	require.NoError(t, sc.Err())
	require.Len(t, runs, jobs, "every job ran")
	dups := 0
	for id, es := range runs {
		for _, e := range es[:len(es)-1] {
			_, wasKilled := killedAt[e.pid]
			require.True(t, wasKilled, "job %s ran again although its earlier run in %d was not killed", id, e.pid)
			dups++
		}
		require.True(t, es[len(es)-1].ended, "job %s's last run did not end", id)
	}
	t.Logf("%d duplicate executions, each explained by a kill", dups)
}

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

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
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
	cmd    *exec.Cmd
	pid    int
	killed time.Time // zero while alive
}

func TestCrashWorkersLoseNoJob(t *testing.T) {
	t.Parallel()
	// BATON_CRASH_JOBS lengthens the run (make chaos).
	jobs, duration := 3000, 20*time.Second
	if v := os.Getenv("BATON_CRASH_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "BATON_CRASH_JOBS")
		jobs, duration = n, time.Duration(n/100)*time.Second
	}
	srv := redistest.StartT(t, nil)
	prefix := fmt.Sprintf("crash%d", time.Now().UnixNano())
	logPath := filepath.Join(t.TempDir(), "executions.log")

	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	d, err := batonredis.New(client, &batonredis.Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	c, err := baton.NewClient(d, &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	require.NoError(t, err)
	ctx := context.Background()
	var batch []*baton.InsertManyParams
	for i := range jobs {
		batch = append(batch, &baton.InsertManyParams{Args: crashArgs{N: i}, Opts: &baton.InsertOpts{MaxAttempts: 1000}})
	}
	_, err = c.InsertMany(ctx, batch)
	require.NoError(t, err)

	var procs []*crashProc
	spawn := func() *crashProc {
		cmd := startChild(t, "jobworker", srv.Addr(), prefix, logPath)
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

	deadline := time.Now().Add(duration + 40*time.Second)
	killUntil := time.Now().Add(duration)
	kills := 0
	for {
		stats, err := c.QueueStats(ctx, "default")
		require.NoError(t, err)
		if stats.Counts[baton.JobStateCompleted] == jobs {
			break
		}
		require.True(t, time.Now().Before(deadline), "jobs not all completed in time: %v", stats.Counts)
		time.Sleep(time.Duration(200+rand.IntN(400)) * time.Millisecond)
		if time.Now().Before(killUntil) {
			i := rand.IntN(len(alive))
			victim := alive[i]
			victim.killed = time.Now()
			require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
			_ = victim.cmd.Wait()
			kills++
			alive[i] = spawn()
		}
	}
	t.Logf("%d jobs completed with %d kills", jobs, kills)

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

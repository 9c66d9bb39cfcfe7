package baton_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/redistest"
)

func init() { children["pausedworker"] = runPausedWorker }

// pausedLease is the lease of the paused worker's jobs, and of the worker
// that takes its job over.
const pausedLease = time.Second

// runPausedWorker works keyed webhooks, one at a time, each handler
// holding on until its context ends; it logs "start ID ATTEMPT FENCE" as a
// handler starts and "end ID CAUSE" as it returns.
func runPausedWorker() int {
	d, f, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		fmt.Fprintf(f, "start %s %d %d\n", job.ID, job.Attempt, job.Fence)
		<-ctx.Done()
		fmt.Fprintf(f, "end %s %s\n", job.ID, strings.ReplaceAll(context.Cause(ctx).Error(), " ", "_"))
		return ctx.Err()
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 1, LeaseTTL: pausedLease, Logger: quiet})
	return childServe(c, err)
}

// A worker process paused (SIGSTOP, as a long GC pause or a frozen VM
// would) past its job's lease loses the job: another worker takes it over
// once the lease has expired by the server's clock, with a higher fence,
// and runs it to completion; when the paused process resumes, its
// handler's context ends with ErrLeaseLost at once, and nothing it would
// record overwrites the job's state. The fence is what a store would use
// to refuse the resumed handler's late writes (docs/locking.md).
func TestPausedWorkerLosesItsJob(t *testing.T) {
	t.Parallel()
	addr := redistest.SharedServer(t).Addr()
	prefix := fmt.Sprintf("pause%d", time.Now().UnixNano())
	logPath := filepath.Join(t.TempDir(), "paused.log")
	child := startChild(t, "pausedworker", addr, prefix, logPath)
	paused := false
	t.Cleanup(func() {
		if paused {
			_ = child.Process.Signal(syscall.SIGCONT)
		}
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	logLine := func(prefix string) []string {
		t.Helper()
		var fields []string
		require.Eventually(t, func() bool {
			data, _ := os.ReadFile(logPath)
			for line := range strings.SplitSeq(string(data), "\n") {
				if strings.HasPrefix(line, prefix) {
					fields = strings.Fields(line)
					return true
				}
			}
			return false
		}, 10*time.Second, time.Millisecond, "the paused worker never logged %q", prefix)
		return fields
	}

	d := redisDriver(t, addr, prefix)
	taken := make(chan *baton.Job[webhookArgs], 1)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
		taken <- job
		return nil
	}), &baton.WorkerOpts{Concurrency: byCustomer(1)})
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 1, LeaseTTL: pausedLease, Logger: quiet,
		PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	ctx := t.Context()
	res, err := c.Insert(ctx, webhookArgs{Customer: "acme"}, nil)
	require.NoError(t, err)
	id := res.Job.ID
	started := logLine("start " + id)
	firstFence, err := strconv.ParseInt(started[3], 10, 64)
	require.NoError(t, err)
	row, err := c.JobGet(ctx, "default", id)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateRunning, row.State)

	require.NoError(t, child.Process.Signal(syscall.SIGSTOP))
	paused = true
	pausedAt := time.Now()
	start(t, c) // the other worker

	var job *baton.Job[webhookArgs]
	select {
	case job = <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the job of the paused worker was not taken over")
	}
	takenAt := time.Now()
	t.Logf("paused with its lease until %v; taken over %v after the pause", row.LeaseUntil.Sub(pausedAt).Round(time.Millisecond),
		takenAt.Sub(pausedAt).Round(time.Millisecond))
	require.True(t, takenAt.After(row.LeaseUntil), "taken over before the paused worker's lease expired")
	require.Equal(t, id, job.ID)
	require.Equal(t, 2, job.Attempt)
	require.Greater(t, job.Fence, firstFence, "the new lease's fence is higher")
	require.Eventually(t, func() bool {
		r, err := c.JobGet(ctx, "default", id)
		return err == nil && r.State == baton.JobStateCompleted
	}, 5*time.Second, time.Millisecond)

	time.Sleep(2 * pausedLease)
	require.NoError(t, child.Process.Signal(syscall.SIGCONT))
	paused = false
	resumedAt := time.Now()
	ended := logLine("end " + id)
	endedAt := time.Now()
	require.Equal(t, strings.ReplaceAll(baton.ErrLeaseLost.Error(), " ", "_"), ended[2], "the resumed handler's cause")
	require.Less(t, endedAt.Sub(resumedAt), time.Second, "the resumed handler's context ends at once")
	t.Logf("the resumed handler's context ended within %v of the resume", endedAt.Sub(resumedAt).Round(time.Millisecond))

	time.Sleep(200 * time.Millisecond) // anything the resumed process would record
	row, err = c.JobGet(ctx, "default", id)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateCompleted, row.State, "the resumed worker overwrote nothing")
	require.Equal(t, 2, row.Attempt)
}

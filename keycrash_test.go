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
// power is shown in batonredis, where it catches a broken promotion.

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

func init() { children["keyworker"] = runKeyedCrashWorker }

// runKeyedCrashWorker logs "start ID KEY FENCE NOW PID" and "end ID KEY
// FENCE NOW PID" around each execution, with write(2), and works until
// killed.
func runKeyedCrashWorker() int {
	d, f, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	var mu sync.Mutex
	pid := os.Getpid()
	logLine := func(what string, job *baton.Job[keyedCrashArgs]) {
		mu.Lock()
		defer mu.Unlock()
		_, _ = fmt.Fprintf(f, "%s %s %s %d %d %d\n", what, job.ID, job.Key, job.Fence, lockcheck.Now(), pid)
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
	if twoQueues(pid) {
		// Half the processes also work an empty queue: they chain jobs
		// only while a worker is free, and hand no worker to the next job.
		cfg.Queues = []baton.QueueConfig{{Name: "default"}, {Name: "other"}}
	}
	c, err := baton.NewClient(d, cfg)
	if err != nil {
		return childFailed(err)
	}
	if err := c.Start(context.Background()); err != nil {
		return childFailed(err)
	}
	fmt.Println("ready")
	select {} // until killed
}

// twoQueues reports whether the keyed crash worker of process pid works two
// queues rather than one.
func twoQueues(pid int) bool { return pid%2 == 1 }

// keyedCrashClient is crashClient with the limits of keyedCrashKeys stored
// (the workers' default limit is 1).
func keyedCrashClient(t *testing.T, srv *redistest.Server) (*baton.Client, string) {
	t.Helper()
	c, prefix := crashClient(t, srv.Addr())
	for k, limit := range keyedCrashKeys {
		if limit != 1 {
			_, err := c.SetLimit(t.Context(), "default", k, limit)
			require.NoError(t, err)
		}
	}
	return c, prefix
}

func TestCrashKeyedWorkersKeepLimits(t *testing.T) {
	t.Parallel()
	jobs, duration := crashJobs(t, 1500)
	srv := redistest.StartT(t, nil)
	logPath := filepath.Join(t.TempDir(), "executions.log")
	c, prefix := keyedCrashClient(t, srv)
	ctx := context.Background()
	var batch []*baton.InsertManyParams
	for i := range jobs {
		batch = append(batch, &baton.InsertManyParams{
			Args: keyedCrashArgs{Key: fmt.Sprintf("k%02d", rand.IntN(len(keyedCrashKeys))), N: i},
			Opts: &baton.InsertOpts{MaxAttempts: 1000, Concurrency: &baton.ConcurrencyOpts{
				Key: baton.KeyOf(func(a keyedCrashArgs) string { return a.Key }), Limit: 1,
			}},
		})
	}
	_, err := c.InsertMany(ctx, batch)
	require.NoError(t, err)
	procs := crashRun(t, "keyworker", srv.Addr(), prefix, logPath, duration, completed(t, c, jobs))
	execs, ids := readKeyedLog(t, logPath, procs)
	require.Len(t, ids, jobs, "every job ran")
	require.NoError(t, keycheck.Check(execs, keyedCrashKeys))
	two := 0
	for _, p := range procs {
		if twoQueues(p.pid) {
			two++
		}
	}
	t.Logf("%d executions of %d jobs on %d keys by %d processes (%d working two queues): no key over its limit, fences in order",
		len(execs), jobs, len(keyedCrashKeys), len(procs), two)
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

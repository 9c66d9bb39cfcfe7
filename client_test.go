package baton_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/redistest"
)

// children are the roles this test binary plays when a test starts it again
// as a separate OS process with BATON_CHILD=name.
var children = map[string]func() int{}

func TestMain(m *testing.M) { redistest.Main(m, children) }

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

type otherArgs struct{}

func (otherArgs) Kind() string { return "other" }

var quiet = slog.New(slog.DiscardHandler)

// setup returns a client on a fresh memory backend with w registered for
// emailArgs, stopped when the test ends.
func setup(t *testing.T, w baton.Worker[emailArgs], cfg *baton.Config) (*baton.Client, batondriver.JobDriver) {
	t.Helper()
	t.Parallel()
	d := newJobDriver(t)
	c := cfg
	if c == nil {
		c = &baton.Config{}
	}
	if c.Workers == nil && w != nil {
		c.Workers = baton.NewWorkers()
		baton.AddWorker(c.Workers, w, nil)
	}
	if c.Logger == nil {
		c.Logger = quiet
	}
	if c.PollInterval == 0 {
		c.PollInterval = 5 * time.Second // waking must not depend on the poll
	}
	client, err := baton.NewClient(d, c)
	require.NoError(t, err)
	return client, d
}

// countingWorkers returns workers with one worker for T, registered with
// opts, that only counts the jobs it runs.
func countingWorkers[T baton.JobArgs](opts *baton.WorkerOpts) (*baton.Workers, *atomic.Int32) {
	var done atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[T](func(context.Context, *baton.Job[T]) error {
		done.Add(1)
		return nil
	}), opts)
	return workers, &done
}

// onRedis marks the subtests of eachBackend that run on Redis.
var onRedis sync.Map // *testing.T -> bool

// eachBackend runs fn as a subtest on the in-memory backend and on Redis.
func eachBackend(t *testing.T, fn func(t *testing.T)) {
	t.Run("memory", fn)
	t.Run("redis", func(t *testing.T) {
		onRedis.Store(t, true)
		t.Cleanup(func() { onRedis.Delete(t) })
		fn(t)
	})
}

// newJobDriver returns the backend of t: Redis (the shared test server, a
// key prefix of the test's own) in eachBackend's redis subtests, else memory.
func newJobDriver(t *testing.T) batondriver.JobDriver {
	if _, ok := onRedis.Load(t); !ok {
		return batonmem.New()
	}
	return redisDriver(t, redistest.SharedServer(t).Addr(), fmt.Sprintf("ct%d", time.Now().UnixNano()))
}

// redisDriver returns a Redis driver with its own client on the server at
// addr (or the Cluster at its nodes' addresses, comma-separated), keys
// under prefix ("" for the default), both closed with the test.
func redisDriver(t testing.TB, addr, prefix string) *batonredis.Driver {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(addr, ",")})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	d, err := batonredis.New(client, &batonredis.Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// BenchmarkInsertOne inserts one job at a time from one goroutine into a
// private Redis: through the Client, and through its driver alone, so that
// the difference is the Client's own cost per insert (-benchmem counts its
// allocations). The jobs pile up available: nothing works them.
//
//	go test -run '^$' -bench InsertOne -benchmem .
func BenchmarkInsertOne(b *testing.B) {
	d := redisDriver(b, redistest.StartT(b, nil).Addr(), "")
	c, err := baton.NewClient(d, &baton.Config{Logger: quiet})
	require.NoError(b, err)
	args, err := json.Marshal(emailArgs{To: "a"})
	require.NoError(b, err)
	b.Run("Client", func(b *testing.B) {
		for b.Loop() {
			if _, err := c.Insert(b.Context(), emailArgs{To: "a"}, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Driver", func(b *testing.B) {
		p := &batondriver.JobInsertParams{Queue: "default",
			Jobs: []*batondriver.JobInsert{{Kind: emailArgs{}.Kind(), Args: args, MaxAttempts: 25}}}
		for b.Loop() {
			if _, err := d.JobInsert(b.Context(), p); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func start(t *testing.T, c *baton.Client) {
	t.Helper()
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

// stopAsync stops c in a goroutine with a context of timeout; Stop's
// result arrives on the channel.
func stopAsync(c *baton.Client, timeout time.Duration) <-chan error {
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		stopped <- c.Stop(ctx)
	}()
	return stopped
}

// waitState waits until the job reaches state.
func waitState(t *testing.T, c *baton.Client, queue, id string, state baton.JobState) *baton.JobRow {
	t.Helper()
	var row *baton.JobRow
	require.Eventually(t, func() bool {
		var err error
		row, err = c.JobGet(context.Background(), queue, id)
		return err == nil && row.State == state
	}, 5*time.Second, 5*time.Millisecond, "job %s never reached %s (last: %+v)", id, state, row)
	return row
}

// hear returns an OnJobEnd that passes events on to ch, dropping those
// past its buffer: it must not block a worker, even when a test fails.
func hear(ch chan<- *baton.JobEvent) func(*baton.JobEvent) {
	return func(ev *baton.JobEvent) {
		select {
		case ch <- ev:
		default:
		}
	}
}

// nextEvent returns the next event on ch, failing t if none comes soon.
func nextEvent(t *testing.T, ch <-chan *baton.JobEvent) *baton.JobEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no attempt ended within 5s")
		return nil
	}
}

func TestInsertValidates(t *testing.T) {
	c, _ := setup(t, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), &baton.Config{MaxArgsBytes: 64})
	ctx := context.Background()
	for _, tc := range []struct {
		args baton.JobArgs
		opts *baton.InsertOpts
		want string
	}{
		{nil, nil, "nil args"},
		{otherArgs{}, nil, `unknown job kind "other"`},
		{emailArgs{}, &baton.InsertOpts{Queue: "bad queue"}, `byte ' ' not allowed`},
		{emailArgs{}, &baton.InsertOpts{Priority: 10}, "priority 10 out of range 0..9"},
		{emailArgs{}, &baton.InsertOpts{MaxAttempts: -1}, "negative MaxAttempts"},
		{emailArgs{}, &baton.InsertOpts{Delay: -time.Second}, "negative Delay"},
		{emailArgs{}, &baton.InsertOpts{Metadata: []byte("{")}, "metadata is not valid JSON"},
		{emailArgs{}, &baton.InsertOpts{Tags: []string{""}}, "tag"},
		{emailArgs{To: strings.Repeat("x", 100)}, nil, "exceed Config.MaxArgsBytes (64)"},
	} {
		_, err := c.Insert(ctx, tc.args, tc.opts)
		require.ErrorContains(t, err, tc.want)
		require.NotContains(t, err.Error(), "#0", "a single insert has no index")
		if _, ok := tc.args.(otherArgs); !ok {
			require.ErrorIs(t, err, batondriver.ErrBadParams, "bad input, not a backend failure")
		}
	}
	_, err := c.Insert(ctx, otherArgs{}, nil)
	require.ErrorIs(t, err, baton.ErrUnknownKind)
	_, err = c.InsertMany(ctx, []*baton.InsertManyParams{{Args: emailArgs{}}, {Args: emailArgs{}, Opts: &baton.InsertOpts{Priority: 10}}})
	require.ErrorContains(t, err, "insert #1: ")
	require.ErrorIs(t, err, batondriver.ErrBadParams)
}

func TestNewClientValidates(t *testing.T) {
	t.Parallel()
	_, err := baton.NewClient(nil, nil)
	require.ErrorContains(t, err, "nil driver")
	_, err = baton.NewClient(batonmem.New(), &baton.Config{Queues: []baton.QueueConfig{{Name: "a"}, {Name: "a"}}})
	require.ErrorContains(t, err, `queue "a" listed twice`)
	_, err = baton.NewClient(batonmem.New(), &baton.Config{Concurrency: -1, LeaseTTL: time.Millisecond})
	require.ErrorContains(t, err, "Concurrency is negative")
	require.ErrorContains(t, err, "LeaseTTL 1ms is shorter than 30ms")
	_, err = baton.NewClient(batonmem.New(), &baton.Config{MaxArgsBytes: -1})
	require.ErrorContains(t, err, "MaxArgsBytes is negative (-1)")
	_, err = baton.NewClient(batonmem.New(), &baton.Config{PollInterval: time.Microsecond})
	require.ErrorContains(t, err, "PollInterval 1µs is shorter than 1ms")
	_, err = baton.NewClient(batonmem.New(), &baton.Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 29 * time.Second})
	require.ErrorContains(t, err, "HeartbeatInterval 29s must be positive and at most half of LeaseTTL (30s)")
	_, err = baton.NewClient(batonmem.New(), &baton.Config{LeaseTTL: 30 * time.Second, HeartbeatInterval: 15 * time.Second})
	require.NoError(t, err)
	c, err := baton.NewClient(batonmem.New(), nil)
	require.NoError(t, err)
	require.ErrorContains(t, c.Start(context.Background()), "no workers registered")
	require.ErrorContains(t, c.Stop(context.Background()), "not started")

	w := baton.NewWorkers()
	fn := baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil })
	require.NoError(t, baton.AddWorkerSafely(w, fn, nil))
	require.ErrorContains(t, baton.AddWorkerSafely(w, fn, nil), `kind "email" registered twice`)
	require.ErrorContains(t, baton.AddWorkerSafely(&baton.Workers{}, fn, nil), "use NewWorkers")
}

func TestJobsRunWithTypedArgs(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var mu sync.Mutex
		got := map[string]int{}
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			mu.Lock()
			got[job.Args.To]++
			mu.Unlock()
			return nil
		}), nil)
		start(t, c)
		ctx := context.Background()
		var jobs []*baton.InsertManyParams
		for i := range 50 {
			jobs = append(jobs, &baton.InsertManyParams{Args: emailArgs{To: fmt.Sprintf("u%d", i)}})
		}
		res, err := c.InsertMany(ctx, jobs)
		require.NoError(t, err)
		require.Len(t, res, 50)
		for _, r := range res {
			waitState(t, c, "default", r.Job.ID, baton.JobStateCompleted)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, got, 50)
		for to, n := range got {
			require.Equal(t, 1, n, "job for %s ran %d times", to, n)
		}
	})
}

func TestIdleWorkerWakesAtOnce(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		ran := make(chan time.Time, 1)
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			ran <- time.Now()
			return nil
		}), nil)
		start(t, c)
		time.Sleep(50 * time.Millisecond) // let the pool go idle
		inserted := time.Now()
		_, err := c.Insert(context.Background(), emailArgs{To: "a"}, nil)
		require.NoError(t, err)
		select {
		case at := <-ran:
			require.Less(t, at.Sub(inserted), 500*time.Millisecond, "woken by the insert, not the 5s poll")
		case <-time.After(3 * time.Second):
			t.Fatal("the job did not start")
		}
	})
}

func TestRetryThenSucceed(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var calls atomic.Int32
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			if calls.Add(1) <= 2 {
				return fmt.Errorf("flaky %d", job.Attempt)
			}
			return nil
		}), &baton.Config{Backoff: func(int) time.Duration { return 10 * time.Millisecond }})
		start(t, c)
		res, err := c.Insert(context.Background(), emailArgs{To: "a"}, nil)
		require.NoError(t, err)
		row := waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
		require.Equal(t, 3, row.Attempt)
		require.Len(t, row.Errors, 2)
		require.Equal(t, "flaky 1", row.Errors[0].Error)
		require.Equal(t, 2, row.Errors[1].Attempt)
	})
}

func TestAttemptsUsedUpGoesDead(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			return errors.New("always")
		}), &baton.Config{Backoff: func(int) time.Duration { return time.Millisecond }})
		start(t, c)
		res, err := c.Insert(context.Background(), emailArgs{To: "a"}, &baton.InsertOpts{MaxAttempts: 3})
		require.NoError(t, err)
		row := waitState(t, c, "default", res.Job.ID, baton.JobStateDead)
		require.Equal(t, 3, row.Attempt)
		require.Len(t, row.Errors, 3)

		dead, total, err := c.JobList(context.Background(), "default", baton.JobStateDead, nil)
		require.NoError(t, err)
		require.Equal(t, 1, total)
		require.Equal(t, res.Job.ID, dead[0].ID)
	})
}

func TestSnoozeDoesNotCountAttempt(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var calls atomic.Int32
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			if calls.Add(1) <= 3 {
				return baton.JobSnooze(5 * time.Millisecond)
			}
			return nil
		}), nil)
		start(t, c)
		res, err := c.Insert(context.Background(), emailArgs{To: "a"}, &baton.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		row := waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
		require.Equal(t, 1, row.Attempt, "snoozes must not use up attempts")
		require.Equal(t, int32(4), calls.Load())
	})
}

func TestCancelEndsWithoutRetry(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var calls atomic.Int32
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			calls.Add(1)
			return baton.JobCancel(errors.New("account closed"))
		}), nil)
		start(t, c)
		res, err := c.Insert(context.Background(), emailArgs{To: "a"}, nil)
		require.NoError(t, err)
		row := waitState(t, c, "default", res.Job.ID, baton.JobStateCancelled)
		require.Contains(t, row.Errors[0].Error, "account closed")
		require.Equal(t, int32(1), calls.Load())

		// The admin API brings it back.
		_, err = c.JobRetry(context.Background(), "default", res.Job.ID)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return calls.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	})
}

// A handler's panic is the attempt's error, a *PanicError with the value
// and the stack, which OnJobEnd hears and the job records.
func TestPanicIsRecoveredAndRetried(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var calls atomic.Int32
		events := make(chan *baton.JobEvent, 2)
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			if calls.Add(1) == 1 {
				panic("boom")
			}
			return nil
		}), &baton.Config{Backoff: func(int) time.Duration { return time.Millisecond }, OnJobEnd: hear(events)})
		start(t, c)
		res, err := c.Insert(context.Background(), emailArgs{To: "a"}, nil)
		require.NoError(t, err)
		row := waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
		ev := nextEvent(t, events)
		require.Equal(t, baton.JobOutcomeRetry, ev.Outcome)
		var p *baton.PanicError
		require.ErrorAs(t, ev.Err, &p)
		require.Equal(t, "boom", p.Value)
		require.EqualError(t, p, "panic: boom")
		require.Contains(t, string(p.Stack), "TestPanicIsRecoveredAndRetried", "the stack from the panic up")
		recorded := row.Errors[0].Error
		require.True(t, strings.HasPrefix(recorded, "panic: boom\n\n"), recorded)
		require.Contains(t, recorded, "TestPanicIsRecoveredAndRetried", "the job records the stack")
	})
}

// A panic in a worker middleware, not only in the handler, is an attempt's
// error: the job is retried with the panic recorded, and the process lives.
func TestMiddlewarePanicIsRecoveredAndRetried(t *testing.T) {
	var calls atomic.Int32
	c, _ := setup(t, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }),
		&baton.Config{
			Backoff: func(int) time.Duration { return time.Millisecond },
			WorkerMiddleware: []baton.WorkerMiddleware{func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
				if calls.Add(1) == 1 {
					panic("middleware boom")
				}
				return next(ctx)
			}},
		})
	start(t, c)
	res, err := c.Insert(context.Background(), emailArgs{To: "a"}, nil)
	require.NoError(t, err)
	row := waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
	require.Len(t, row.Errors, 1)
	require.Contains(t, row.Errors[0].Error, "panic: middleware boom")
}

func TestUnrunnableJobsGoDeadWithReason(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		c, d := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error { return nil }),
			&baton.Config{Backoff: func(int) time.Duration { return time.Millisecond }})
		ctx := context.Background()
		// Another process inserted a kind this one has no worker for, and args
		// this one cannot decode.
		res, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "default", Jobs: []*batondriver.JobInsert{
			{Kind: "other", Args: []byte(`{}`), MaxAttempts: 3},
			{Kind: "email", Args: []byte(`{"to": 42}`), MaxAttempts: 5},
		}})
		require.NoError(t, err)
		start(t, c)
		unknown := waitState(t, c, "default", res.Jobs[0].ID, baton.JobStateDead)
		require.Equal(t, 3, unknown.Attempt, "retried for a process that knows the kind")
		require.Len(t, unknown.Errors, 3)
		require.Contains(t, unknown.Errors[2].Error, `no worker registered for kind "other"`)
		bad := waitState(t, c, "default", res.Jobs[1].ID, baton.JobStateDead)
		require.Contains(t, bad.Errors[0].Error, `args of kind "email" cannot be decoded`)
		require.Equal(t, 1, bad.Attempt, "no retry can help")
	})
}

// Two processes share a queue, each with a worker for one of its two
// kinds (as during a rolling deploy that adds a kind): a job fetched by the
// process without its worker is retried, not lost, and every job runs in
// the process that has its worker.
func TestKindsSplitAcrossProcessesAllRun(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		const each = 20
		var emails, others atomic.Int32
		// A backoff longer than the poll, as by default: by the time a
		// retry is due, both processes have learnt when, and race for it.
		retry := func(int) time.Duration { return 200 * time.Millisecond }
		a, d := setup(t, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
			emails.Add(1)
			return nil
		}), &baton.Config{Backoff: retry, AllowUnknownKinds: true, PollInterval: 20 * time.Millisecond})
		bw := baton.NewWorkers()
		baton.AddWorker(bw, baton.WorkFunc[otherArgs](func(context.Context, *baton.Job[otherArgs]) error {
			others.Add(1)
			return nil
		}), nil)
		b, err := baton.NewClient(d, &baton.Config{Workers: bw, Backoff: retry, Logger: quiet, PollInterval: 20 * time.Millisecond})
		require.NoError(t, err)
		var jobs []*baton.InsertManyParams
		for range each {
			jobs = append(jobs, &baton.InsertManyParams{Args: emailArgs{To: "x"}}, &baton.InsertManyParams{Args: otherArgs{}})
		}
		_, err = a.InsertMany(t.Context(), jobs)
		require.NoError(t, err)
		start(t, a)
		start(t, b)
		deadline := time.Now().Add(20 * time.Second)
		for {
			st, err := a.QueueStats(t.Context(), "default")
			require.NoError(t, err)
			if st.Counts[baton.JobStateCompleted] == 2*each {
				break
			}
			if !time.Now().Before(deadline) {
				dead, _, _ := a.JobList(t.Context(), "default", baton.JobStateDead, nil)
				for _, j := range dead[:min(2, len(dead))] {
					t.Logf("dead %s attempt %d errors %+v", j.Kind, j.Attempt, j.Errors)
				}
				t.Fatalf("not every job completed: %+v", st.Counts)
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.Equal(t, int32(each), emails.Load())
		require.Equal(t, int32(each), others.Load())
	})
}

func TestScheduledJobRunsOnTime(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		ran := make(chan time.Time, 1)
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			ran <- time.Now()
			return nil
		}), nil)
		start(t, c)
		inserted := time.Now()
		res, err := c.Insert(context.Background(), emailArgs{To: "a"}, &baton.InsertOpts{Delay: 200 * time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, baton.JobStateScheduled, res.Job.State)
		at := <-ran
		// Counted on the backend's clock, to its resolution: Redis reads
		// whole milliseconds.
		require.GreaterOrEqual(t, at.Sub(inserted), 199*time.Millisecond)
		require.Less(t, at.Sub(inserted), time.Second, "a due job starts without waiting for the 5s poll")
	})
}

func TestStrictPriority(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []string
		w := baton.NewWorkers()
		baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			mu.Lock()
			order = append(order, job.Queue)
			mu.Unlock()
			return nil
		}), nil)
		c, _ := setup(t, nil, &baton.Config{
			Workers: w, Concurrency: 1, StrictPriority: true,
			Queues: []baton.QueueConfig{{Name: "high"}, {Name: "low"}},
		})
		ctx := context.Background()
		for range 5 {
			_, err := c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "low"})
			require.NoError(t, err)
			_, err = c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "high"})
			require.NoError(t, err)
		}
		start(t, c)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 10 }, 5*time.Second, 5*time.Millisecond)
		require.Equal(t, []string{"high", "high", "high", "high", "high", "low", "low", "low", "low", "low"}, order)
	})
}

// downQueueDriver cannot fetch from one queue, as when the Redis Cluster
// node holding its slot is down.
type downQueueDriver struct {
	batondriver.JobDriver
	down string
}

func (d downQueueDriver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	if p.Queue == d.down {
		return nil, errors.New("connection refused")
	}
	return d.JobDriver.JobFetch(ctx, p)
}

// A queue whose fetches fail holds up no other queue: the others' jobs run,
// also behind it in strict priority.
func TestQueueDownHoldsUpNoOther(t *testing.T) {
	t.Parallel()
	ran := make(chan string, 1)
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		ran <- job.Queue
		return nil
	}), nil)
	c, err := baton.NewClient(downQueueDriver{JobDriver: batonmem.New(), down: "high"}, &baton.Config{
		Workers: w, StrictPriority: true, PollInterval: 50 * time.Millisecond, Logger: quiet,
		Queues: []baton.QueueConfig{{Name: "high"}, {Name: "low"}},
	})
	require.NoError(t, err)
	start(t, c)
	_, err = c.Insert(context.Background(), emailArgs{}, &baton.InsertOpts{Queue: "low"})
	require.NoError(t, err)
	select {
	case q := <-ran:
		require.Equal(t, "low", q)
	case <-time.After(3 * time.Second):
		t.Fatal("the job of a healthy queue did not run while another queue's fetches failed")
	}
}

func TestMiddlewareWrapsInOrder(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var mu sync.Mutex
		var trail []string
		note := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
		mw := func(name string) baton.WorkerMiddleware {
			return func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
				note(name + ">")
				err := next(ctx)
				note("<" + name)
				return err
			}
		}
		done := make(chan struct{})
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			note("work")
			return nil
		}), &baton.Config{
			WorkerMiddleware: []baton.WorkerMiddleware{mw("a"), mw("b")},
			InsertMiddleware: []baton.InsertMiddleware{func(ctx context.Context, jobs []*baton.InsertManyParams, next func(context.Context) ([]*baton.InsertResult, error)) ([]*baton.InsertResult, error) {
				note("insert")
				return next(ctx)
			}},
		})
		start(t, c)
		res, err := c.Insert(context.Background(), emailArgs{}, nil)
		require.NoError(t, err)
		waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
		close(done)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"insert", "a>", "b>", "work", "<b", "<a"}, trail)
	})
}

func TestStopWaitsThenReturnsJobsToQueue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		started := make(chan struct{}, 2)
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			started <- struct{}{}
			if job.Args.To == "slow" {
				<-ctx.Done()
				return context.Cause(ctx)
			}
			time.Sleep(50 * time.Millisecond)
			return nil
		}), nil)
		ctx := context.Background()
		require.NoError(t, c.Start(ctx))
		fast, err := c.Insert(ctx, emailArgs{To: "fast"}, nil)
		require.NoError(t, err)
		slow, err := c.Insert(ctx, emailArgs{To: "slow"}, nil)
		require.NoError(t, err)
		<-started
		<-started

		stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, c.Stop(stopCtx), context.DeadlineExceeded)

		row, err := c.JobGet(ctx, "default", fast.Job.ID)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateCompleted, row.State, "Stop waits for running jobs")
		row, err = c.JobGet(ctx, "default", slow.Job.ID)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateAvailable, row.State, "a job cut off by Stop goes back to its queue")
		require.Equal(t, 0, row.Attempt, "and its attempt is not counted")
		require.Empty(t, row.Errors)
	})
}

// emptyFinishDriver notes the queues of finishes with no outcomes.
type emptyFinishDriver struct {
	batondriver.JobDriver
	mu     sync.Mutex
	queues []string
}

func (d *emptyFinishDriver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	if len(p.Finished) == 0 {
		d.mu.Lock()
		d.queues = append(d.queues, p.Queue)
		d.mu.Unlock()
	}
	return d.JobDriver.JobFinish(ctx, p)
}

// Stop ends with a finish of no outcomes to each queue, with which a
// backend gives back what calls whose replies were lost leased (on Redis:
// TestEmptyFinishSettlesLostCalls).
func TestStopSettlesLostCallsOfEachQueue(t *testing.T) {
	t.Parallel()
	d := &emptyFinishDriver{JobDriver: batonmem.New()}
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: w, Logger: quiet,
		Queues: []baton.QueueConfig{{Name: "a", Weight: 1}, {Name: "b", Weight: 1}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	require.NoError(t, c.Stop(context.Background()))
	d.mu.Lock()
	defer d.mu.Unlock()
	require.ElementsMatch(t, []string{"a", "b"}, d.queues)
}

// losingDriver reports every lease renewal lost.
type losingDriver struct{ batondriver.JobDriver }

func (d losingDriver) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	res := &batondriver.JobExtendResult{}
	for _, l := range p.Leases {
		res.Lost = append(res.Lost, l.ID)
	}
	return res, nil
}

func TestLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	cause := make(chan error, 1)
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}), nil)
	c, err := baton.NewClient(losingDriver{batonmem.New()}, &baton.Config{Workers: w, LeaseTTL: 150 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	_, err = c.Insert(context.Background(), emailArgs{}, nil)
	require.NoError(t, err)
	select {
	case err := <-cause:
		require.ErrorIs(t, err, baton.ErrLeaseLost)
	case <-time.After(2 * time.Second):
		t.Fatal("the handler's context was not cancelled when its lease was lost")
	}
}

// firstLeaseLosingDriver reports the first lease it hands out lost at
// every renewal, and renews every other lease.
type firstLeaseLosingDriver struct {
	batondriver.JobDriver
	first atomic.Pointer[string]
}

func (d *firstLeaseLosingDriver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	res, err := d.JobDriver.JobFetch(ctx, p)
	if err == nil && len(res.Jobs) > 0 {
		d.first.CompareAndSwap(nil, &res.Jobs[0].Lease)
	}
	return res, err
}

func (d *firstLeaseLosingDriver) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	lost := &batondriver.JobExtendResult{}
	q := *p
	q.Leases = nil
	for _, l := range p.Leases {
		if first := d.first.Load(); first != nil && l.Lease == *first {
			lost.Lost = append(lost.Lost, l.ID)
		} else {
			q.Leases = append(q.Leases, l)
		}
	}
	if len(q.Leases) == 0 {
		return lost, nil
	}
	res, err := d.JobDriver.JobExtend(ctx, &q)
	if err != nil {
		return nil, err
	}
	res.Lost = append(res.Lost, lost.Lost...)
	return res, nil
}

// A handler that runs on after its lease was lost, while its job runs
// again in the same process under a new lease, does not stop the heartbeat
// renewing the new lease when it returns at last: the job runs twice, not
// a third time.
func TestHandlerPastItsLostLeaseLeavesTheNewLeaseRenewed(t *testing.T) {
	t.Parallel()
	const ttl = 150 * time.Millisecond
	release := make(chan struct{})
	secondStarted := make(chan struct{})
	var attempts atomic.Int32
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		attempts.Add(1)
		if job.Attempt == 1 {
			<-release // deaf to its cancelled context
			return nil
		}
		if job.Attempt == 2 {
			close(secondStarted)
		}
		time.Sleep(4 * ttl) // outlives its lease unless renewed
		return nil
	}), nil)
	d := &firstLeaseLosingDriver{JobDriver: batonmem.New()}
	c, err := baton.NewClient(d, &baton.Config{Workers: w, Concurrency: 2, LeaseTTL: ttl,
		PollInterval: 10 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	letGo := sync.OnceFunc(func() { close(release) })
	t.Cleanup(letGo) // before Stop, which waits for the handler
	ctx := context.Background()
	res, err := c.Insert(ctx, emailArgs{}, nil)
	require.NoError(t, err)
	select {
	case <-secondStarted:
	case <-time.After(5 * time.Second):
		t.Fatal("the job was not leased again after its first lease was lost")
	}
	letGo()
	waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
	row, err := c.JobGet(ctx, "default", res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, 2, row.Attempt, "the second lease was left unrenewed and the job ran again")
	require.Equal(t, int32(2), attempts.Load())
}

func TestPauseAndResumeQueue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var ran atomic.Int32
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			ran.Add(1)
			return nil
		}), &baton.Config{PollInterval: 20 * time.Millisecond})
		ctx := context.Background()
		require.NoError(t, c.QueuePause(ctx, "default"))
		start(t, c)
		_, err := c.Insert(ctx, emailArgs{}, nil)
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
		require.Zero(t, ran.Load(), "a paused queue ran a job")
		stats, err := c.QueueStats(ctx, "default")
		require.NoError(t, err)
		require.True(t, stats.Paused)
		require.Equal(t, 1, stats.Counts[baton.JobStateAvailable])
		require.NoError(t, c.QueueResume(ctx, "default"))
		require.Eventually(t, func() bool { return ran.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	})
}

func batonmemDriver() batondriver.JobDriver { return batonmem.New() }

// Concurrent single inserts are grouped, and every caller gets its own job.
func TestConcurrentInsertsEachGetTheirJob(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
		ctx := context.Background()
		const n = 200
		var wg sync.WaitGroup
		ids := make([]string, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Insert(ctx, emailArgs{To: fmt.Sprint(i)}, nil)
				require.NoError(t, err)
				require.JSONEq(t, fmt.Sprintf(`{"to":"%d"}`, i), string(res.Job.Args), "caller %d got another's job", i)
				ids[i] = res.Job.ID
			}()
		}
		wg.Wait()
		seen := map[string]bool{}
		for _, id := range ids {
			require.False(t, seen[id], "duplicate ID %s", id)
			seen[id] = true
			row, err := c.JobGet(ctx, "default", id)
			require.NoError(t, err)
			require.Equal(t, baton.JobStateAvailable, row.State)
		}
		stats, err := c.QueueStats(ctx, "default")
		require.NoError(t, err)
		require.Equal(t, n, stats.Counts[baton.JobStateAvailable])
	})
}

// lateFetchDriver runs a fetch at once but answers it only after 100ms,
// or, if ctx ends first, gives ctx's error as a client whose call was cut
// off does: the jobs it leased are then nobody's until their leases end.
type lateFetchDriver struct {
	batondriver.JobDriver
	leased chan struct{} // a value per fetch that leased jobs
}

func (d lateFetchDriver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	res, err := d.JobDriver.JobFetch(context.WithoutCancel(ctx), p)
	if err != nil || len(res.Jobs) == 0 {
		return res, err
	}
	d.leased <- struct{}{}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(100 * time.Millisecond):
		return res, nil
	}
}

// A fetch in flight when Stop begins is seen through: its job runs, rather
// than waiting out its lease as nobody's and then coming back with its one
// attempt spent.
func TestStopSeesFetchInFlightThrough(t *testing.T) {
	t.Parallel()
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
	d := lateFetchDriver{JobDriver: batonmem.New(), leased: make(chan struct{}, 10)}
	c, err := baton.NewClient(d, &baton.Config{Workers: w, Logger: quiet})
	require.NoError(t, err)
	ctx := context.Background()
	res, err := c.Insert(ctx, emailArgs{}, &baton.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	<-d.leased
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))
	row, err := c.JobGet(ctx, "default", res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateCompleted, row.State, "the job of a fetch that Stop cut off was left to its lease")
}

// failingFinishDriver cannot record outcomes, as during an outage.
type failingFinishDriver struct{ batondriver.JobDriver }

func (failingFinishDriver) JobFinish(context.Context, *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	return nil, errors.New("connection refused")
}

// startedAfterOneJob starts a client on d with cfg and an emailArgs worker,
// and returns once the worker has run one inserted job. The caller stops
// the client.
func startedAfterOneJob(t *testing.T, d batondriver.JobDriver, cfg *baton.Config) *baton.Client {
	t.Helper()
	ran := make(chan struct{}, 10)
	cfg.Workers = baton.NewWorkers()
	baton.AddWorker(cfg.Workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		ran <- struct{}{}
		return nil
	}), nil)
	c, err := baton.NewClient(d, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	_, err = c.Insert(context.Background(), emailArgs{}, nil)
	require.NoError(t, err)
	<-ran
	return c
}

// Stop does not hang when outcomes cannot be recorded: it gives up when its
// context ends (the jobs run again when their leases expire).
func TestStopGivesUpOnUnrecordableOutcomes(t *testing.T) {
	t.Parallel()
	c := startedAfterOneJob(t, failingFinishDriver{batonmem.New()}, &baton.Config{Logger: quiet})
	ctx := context.Background()
	stopCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	require.ErrorIs(t, c.Stop(stopCtx), context.DeadlineExceeded)
	require.Less(t, time.Since(began), 2*time.Second)
}

// stalledFinishDriver's JobFinish waits for a reply that does not come, as
// on a stalled server, until its context ends or release is closed.
type stalledFinishDriver struct {
	batondriver.JobDriver
	release chan struct{}
}

func (d stalledFinishDriver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.release:
		return d.JobDriver.JobFinish(ctx, p)
	}
}

// Stop returns soon after its context ends even if a call recording
// outcomes hangs (the server stalls): it waits for that call's reply no
// longer than the leases it presents last (LeaseTTL).
func TestStopGivesUpOnStalledOutcomes(t *testing.T) {
	t.Parallel()
	d := stalledFinishDriver{JobDriver: batonmem.New(), release: make(chan struct{})}
	// Two queues: no finish leases jobs (handoff), so no call has a
	// deadline of its own.
	c := startedAfterOneJob(t, d, &baton.Config{Logger: quiet, DisableChaining: true, LeaseTTL: time.Second,
		Queues: []baton.QueueConfig{{Name: "default"}, {Name: "other"}}})
	stopped := stopAsync(c, 300*time.Millisecond)
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(5 * time.Second):
		close(d.release) // let Stop return
		<-stopped
		t.Fatal("Stop waited for a stalled call long past its context and LeaseTTL")
	}
}

// With every worker busy, each finish hands its worker the next job and
// the dispatcher never fetches; due jobs must still be admitted and run.
func TestDueJobRunsWhileWorkersBusy(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		ran := make(chan struct{})
		var once sync.Once
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			if job.Args.To == "due" {
				once.Do(func() { close(ran) })
				return nil
			}
			time.Sleep(time.Millisecond)
			return baton.JobAgain() // run again: the backlog never ends
		}), &baton.Config{Concurrency: 2, PollInterval: 50 * time.Millisecond})
		ctx := context.Background()
		for range 4 {
			_, err := c.Insert(ctx, emailArgs{To: "loop"}, nil)
			require.NoError(t, err)
		}
		start(t, c)
		time.Sleep(50 * time.Millisecond) // both workers busy, handed on by their finishes
		_, err := c.Insert(ctx, emailArgs{To: "due"}, &baton.InsertOpts{Delay: 50 * time.Millisecond})
		require.NoError(t, err)
		select {
		case <-ran:
		case <-time.After(3 * time.Second):
			t.Fatal("a job that came due while every worker was busy did not run")
		}
	})
}

// waitsDriver signals when a JobWait on queue begins and when it ends.
type waitsDriver struct {
	batondriver.JobDriver
	queue      string
	began, end chan struct{}
}

func (d *waitsDriver) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	if p.Queue != d.queue {
		return d.JobDriver.JobWait(ctx, p)
	}
	select {
	case d.began <- struct{}{}:
	default:
	}
	err := d.JobDriver.JobWait(ctx, p)
	select {
	case d.end <- struct{}{}:
	default:
	}
	return err
}

// A process whose pool fills while it waits for wake-ups leaves the next
// one to an idle process: the idle one starts a new job at once, not at its
// next poll. Here process a works two queues with one worker: its wait on
// the second begins first, and a job of the first fills its pool before a
// job of the second is inserted.
func TestFullProcessLeavesWakeUpToIdleOne(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := newJobDriver(t)
		started := make(chan string, 4)
		release := make(chan struct{})
		newClient := func(name string, d batondriver.JobDriver, queues ...string) *baton.Client {
			w := baton.NewWorkers()
			baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
				started <- name
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}), nil)
			var qs []baton.QueueConfig
			for _, q := range queues {
				qs = append(qs, baton.QueueConfig{Name: q})
			}
			c, err := baton.NewClient(d, &baton.Config{Workers: w, Concurrency: 1, Queues: qs, PollInterval: time.Minute, Logger: quiet})
			require.NoError(t, err)
			start(t, c)
			return c
		}
		waits := &waitsDriver{JobDriver: d, queue: "second", began: make(chan struct{}, 1), end: make(chan struct{}, 1)}
		a := newClient("a", waits, "first", "second")
		await := func(ch <-chan struct{}, what string) {
			t.Helper()
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatal(what)
			}
		}
		await(waits.began, "a does not wait on the second queue")
		time.Sleep(50 * time.Millisecond) // its wait reaches the backend before b's
		newClient("b", d, "second")

		ctx := context.Background()
		_, err := a.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "first"})
		require.NoError(t, err)
		select {
		case name := <-started:
			require.Equal(t, "a", name)
		case <-time.After(5 * time.Second):
			t.Fatal("the first job did not start")
		}
		await(waits.end, "a's wait on the second queue goes on with its pool full")
		if _, ok := onRedis.Load(t); ok {
			// rueidis ends a cancelled BLPOP with a CLIENT UNBLOCK sent after
			// JobWait returned: a token pushed before it lands still goes to
			// a. The window is a round trip; leave it well behind.
			time.Sleep(250 * time.Millisecond)
		}
		_, err = a.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "second"})
		require.NoError(t, err)
		select {
		case name := <-started:
			require.Equal(t, "b", name)
		case <-time.After(5 * time.Second):
			t.Fatal("the idle process did not start the second job: the full one took its wake-up")
		}
		close(release)
	})
}

// A kind registered for a queue the client does not work would never run
// here, silently: Start says so.
func TestStartWarnsOfKindsInUnworkedQueues(t *testing.T) {
	var mu sync.Mutex
	var warned []string
	log := slog.New(&hookHandler{fn: func(r slog.Record) {
		if !strings.HasPrefix(r.Message, "baton: Start: the kind's queue is not in Config.Queues") {
			return
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "kind" {
				mu.Lock()
				warned = append(warned, a.Value.String())
				mu.Unlock()
			}
			return true
		})
	}})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }),
		&baton.WorkerOpts{Queue: "mail"})
	baton.AddWorker(workers, baton.WorkFunc[otherArgs](func(context.Context, *baton.Job[otherArgs]) error { return nil }), nil)
	c, _ := setup(t, nil, &baton.Config{Workers: workers, Logger: log})
	start(t, c)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"email"}, warned, "other's queue, default, is worked")
}

package batonprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/batonprom"
	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

var quiet = slog.New(slog.DiscardHandler)

// taskArgs.Do says what the handler does: complete, retry (fail the first
// attempt), cancel, again (ask for a second run).
type taskArgs struct {
	Do string `json:"do"`
}

func (taskArgs) Kind() string { return "task" }

// keyedArgs jobs have the concurrency key user:N, limit 1.
type keyedArgs struct {
	User int `json:"user"`
}

func (keyedArgs) Kind() string { return "keyed" }

// setup returns Metrics registered with a fresh registry.
func setup(t *testing.T, cfg *batonprom.Config) (*batonprom.Metrics, *prometheus.Registry) {
	t.Helper()
	t.Parallel()
	if cfg == nil {
		cfg = &batonprom.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	m, err := batonprom.New(cfg)
	require.NoError(t, err)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, m.Register(reg))
	return m, reg
}

// gather returns every series of reg by its name with its labels sorted,
// e.g. `baton_queue_jobs{queue="q",state="dead"}`, and its value (a
// histogram's sample count, under name_count).
func gather(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var ls []string
			for _, lp := range mt.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			name := mf.GetName()
			if len(ls) > 0 {
				name += "{" + strings.Join(ls, ",") + "}"
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[name] = mt.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[name] = mt.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[strings.Replace(name, "{", "_count{", 1)] = float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// labelValues are the values each label name takes in a gather.
func labelValues(t *testing.T, reg prometheus.Gatherer) map[string][]string {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	seen := map[string]map[string]bool{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, lp := range mt.GetLabel() {
				if seen[lp.GetName()] == nil {
					seen[lp.GetName()] = map[string]bool{}
				}
				seen[lp.GetName()][lp.GetValue()] = true
			}
		}
	}
	out := map[string][]string{}
	for name, vs := range seen {
		for v := range vs {
			out[name] = append(out[name], v)
		}
		sort.Strings(out[name])
	}
	return out
}

// TestJobsAndLocks runs jobs of every common outcome, a drop by
// OnBusyDrop, a refusal by OnBusyFail and a contended lock on the memory
// backend, and checks every count and that no label carries a job ID or a
// key.
func TestJobsAndLocks(t *testing.T) {
	m, reg := setup(t, nil)
	ctx := context.Background()
	driver := batonmem.New()

	ended := make(chan *baton.JobEvent, 100)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[taskArgs](func(ctx context.Context, job *baton.Job[taskArgs]) error {
		switch job.Args.Do {
		case "retry":
			if job.Attempt == 1 {
				return errors.New("flaky")
			}
		case "cancel":
			return baton.JobCancel(errors.New("not wanted"))
		case "again":
			if job.Runs == 0 {
				return baton.JobAgain()
			}
		}
		return nil
	}), &baton.WorkerOpts{Backoff: func(int) time.Duration { return time.Millisecond }})
	baton.AddWorker(workers, baton.WorkFunc[keyedArgs](func(context.Context, *baton.Job[keyedArgs]) error { return nil }),
		&baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
			Key:    baton.KeyOf(func(a keyedArgs) string { return fmt.Sprintf("user:%d", a.User) }),
			OnBusy: baton.OnBusyDrop,
		}})
	client, err := baton.NewClient(driver, &baton.Config{
		Workers: workers,
		OnJobEnd: func(ev *baton.JobEvent) {
			m.OnJobEnd(ev)
			ended <- ev
		},
		InsertMiddleware: []baton.InsertMiddleware{m.InsertMiddleware},
		Logger:           quiet,
	})
	require.NoError(t, err)
	m.CollectQueues(client) // every queue the backend lists

	// Inserted before the client starts, so the second keyed job finds its
	// key held by the first (available) and is dropped.
	var ids []string
	insert := func(args baton.JobArgs, opts *baton.InsertOpts) *baton.InsertResult {
		res, err := client.Insert(ctx, args, opts)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
		return res
	}
	for _, do := range []string{"complete", "retry", "cancel", "again"} {
		insert(taskArgs{Do: do}, nil)
	}
	insert(keyedArgs{User: 1}, nil)
	require.Equal(t, baton.JobStateDropped, insert(keyedArgs{User: 1}, nil).Job.State)
	// OnBusyFail refuses the second insert: no row, no queue known.
	failFast := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{
		Key:    baton.KeyOf(func(a keyedArgs) string { return "user:2" }),
		OnBusy: baton.OnBusyFail,
	}}
	insert(keyedArgs{User: 2}, failFast)
	_, err = client.Insert(ctx, keyedArgs{User: 2}, failFast)
	require.ErrorIs(t, err, baton.ErrKeyBusy)

	require.NoError(t, client.Start(ctx))
	// complete, retry ×2, cancel, again ×2, keyed user:1, keyed user:2.
	for range 8 {
		select {
		case <-ended:
		case <-time.After(10 * time.Second):
			t.Fatal("jobs did not finish")
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, client.Stop(stopCtx)) // every outcome recorded

	// A lock: a try that fails, then a wait that is granted.
	locker, err := batonlock.New(driver, &batonlock.Config{OnAcquire: m.OnAcquire, Logger: quiet})
	require.NoError(t, err)
	held, err := locker.TryAcquire(ctx, "sync:user:1", nil)
	require.NoError(t, err)
	_, err = locker.TryAcquire(ctx, "sync:user:1", nil)
	require.ErrorIs(t, err, batonlock.ErrNotAcquired)
	waiting := make(chan struct{})
	granted := make(chan *batonlock.Lease)
	go func() {
		lease, err := locker.Acquire(ctx, "sync:user:1", &batonlock.AcquireOpts{OnWait: func(int) { close(waiting) }})
		if err != nil {
			lease = nil
		}
		granted <- lease
	}()
	<-waiting
	require.NoError(t, held.Release(ctx))
	lease := <-granted
	require.NotNil(t, lease)
	require.NoError(t, lease.Release(ctx))

	got := gather(t, reg)
	want := map[string]float64{
		`baton_jobs_finished_total{kind="task",outcome="completed",queue="default"}`:  3,
		`baton_jobs_finished_total{kind="task",outcome="retry",queue="default"}`:      1,
		`baton_jobs_finished_total{kind="task",outcome="cancel",queue="default"}`:     1,
		`baton_jobs_finished_total{kind="task",outcome="again",queue="default"}`:      1,
		`baton_jobs_finished_total{kind="keyed",outcome="completed",queue="default"}`: 2,
		`baton_job_run_seconds_count{kind="task",queue="default"}`:                    6,
		`baton_job_wait_seconds_count{kind="task",queue="default"}`:                   6,
		`baton_job_run_seconds_count{kind="keyed",queue="default"}`:                   2,

		`baton_jobs_inserted_total{kind="task",queue="default",status="inserted"}`:  4,
		`baton_jobs_inserted_total{kind="keyed",queue="default",status="inserted"}`: 2,
		`baton_jobs_inserted_total{kind="keyed",queue="default",status="dropped"}`:  1,
		`baton_jobs_inserted_total{kind="keyed",queue="",status="rejected"}`:        1,

		`baton_lock_acquires_total{mode="try",result="granted"}`:      1,
		`baton_lock_acquires_total{mode="try",result="not_granted"}`:  1,
		`baton_lock_acquires_total{mode="wait",result="granted"}`:     1,
		`baton_lock_acquires_total{mode="wait",result="not_granted"}`: 0,
		`baton_lock_wait_seconds_count{mode="wait",result="granted"}`: 1,

		`baton_queue_jobs{queue="default",state="scheduled"}`:       0,
		`baton_queue_jobs{queue="default",state="parked"}`:          0,
		`baton_queue_jobs{queue="default",state="available"}`:       0,
		`baton_queue_jobs{queue="default",state="running"}`:         0,
		`baton_queue_jobs{queue="default",state="completed"}`:       5,
		`baton_queue_jobs{queue="default",state="cancelled"}`:       1,
		`baton_queue_jobs{queue="default",state="dead"}`:            0,
		`baton_queue_jobs{queue="default",state="dropped"}`:         1,
		`baton_queue_paused{queue="default"}`:                       0,
		`baton_queue_active_keys{queue="default"}`:                  0,
		`baton_queue_oldest_available_age_seconds{queue="default"}`: 0,
		`baton_jobs_dropped_total{queue="default"}`:                 1,
		`baton_queue_scrape_errors_total`:                           0,
	}
	for k, v := range want {
		require.Contains(t, got, k)
		require.Equal(t, v, got[k], k)
	}

	// Names, types and units as Prometheus recommends them.
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	// Bounded labels: every value from a small known set; no job ID, no key.
	allowed := map[string][]string{
		"queue":   {"", "default"},
		"kind":    {"keyed", "task"},
		"outcome": {"again", "cancel", "completed", "dead", "lost", "retry", "snooze"},
		"status":  {"dropped", "duplicate", "inserted", "rejected", "replaced"},
		"state":   {"available", "cancelled", "completed", "dead", "dropped", "parked", "running", "scheduled"},
		"mode":    {"try", "wait"},
		"result":  {"granted", "not_granted"},
		"le":      nil, // histogram buckets: numbers
	}
	for name, values := range labelValues(t, reg) {
		want, ok := allowed[name]
		require.True(t, ok, "unexpected label %q", name)
		for _, v := range values {
			if name != "le" {
				require.Contains(t, want, v, "label %s", name)
			}
			require.NotContains(t, v, "user:")
			require.False(t, slices.Contains(ids, v), "label %s has a job ID", name)
		}
	}
}

// TestLockKeyLabel maps lock keys to a bounded label.
func TestLockKeyLabel(t *testing.T) {
	m, reg := setup(t, &batonprom.Config{Namespace: "app", LockKeyLabel: batonprom.KeyPrefix(2)})
	ctx := context.Background()
	locker, err := batonlock.New(batonmem.New(), &batonlock.Config{OnAcquire: m.OnAcquire, Logger: quiet})
	require.NoError(t, err)
	for user := range 3 {
		ran, err := locker.TryDo(ctx, fmt.Sprintf("sync:user:%d", user), nil, func(context.Context, *batonlock.Lease) error { return nil })
		require.NoError(t, err)
		require.True(t, ran)
	}
	got := gather(t, reg)
	require.Equal(t, 3.0, got[`app_lock_acquires_total{key="sync:user",mode="try",result="granted"}`])
	require.Equal(t, 3.0, got[`app_lock_wait_seconds_count{key="sync:user",mode="try",result="granted"}`])
	require.NotContains(t, labelValues(t, reg)["key"], "sync:user:0")
}

func TestKeyPrefix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n        int
		key, out string
	}{
		{2, "sync:user:42", "sync:user"},
		{1, "sync:user:42", "sync"},
		{3, "sync:user:42", "sync:user:42"},
		{5, "sync:user:42", "sync:user:42"},
		{2, "ledger", "ledger"},
		{1, ":x", ""},
		{0, "sync:user:42", ""},
	} {
		require.Equal(t, tc.out, batonprom.KeyPrefix(tc.n)(tc.key), "%d %q", tc.n, tc.key)
	}
}

// TestNewValidates refuses configs Prometheus would panic on or refuse.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  batonprom.Config
		want string
	}{
		{batonprom.Config{RunBuckets: []float64{1, 1}}, "RunBuckets are not strictly increasing"},
		{batonprom.Config{LockWaitBuckets: []float64{2, 1}}, "LockWaitBuckets are not strictly increasing"},
		{batonprom.Config{ScrapeTimeout: -time.Second}, "ScrapeTimeout is negative"},
		{batonprom.Config{ConstLabels: prometheus.Labels{"queue": "x"}}, "duplicate label names"},
		{batonprom.Config{ConstLabels: prometheus.Labels{"__reserved": "x"}}, "__reserved"},
	} {
		_, err := batonprom.New(&tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	m, err := batonprom.New(&batonprom.Config{ConstLabels: prometheus.Labels{"service": "billing"}})
	require.NoError(t, err)
	m.OnJobEnd(&baton.JobEvent{Queue: "q", Kind: "bad\xffkind", Outcome: baton.JobOutcomeLost})
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, m.Register(reg))
	require.Equal(t, 1.0, gather(t, reg)["baton_jobs_finished_total{kind=\"bad\ufffdkind\",outcome=\"lost\",queue=\"q\",service=\"billing\"}"])
	require.Error(t, m.Register(reg), "registered twice")
}

// stuckDriver is a memory backend whose QueueStats does not answer until
// release is closed, honouring its context or not.
type stuckDriver struct {
	batondriver.JobDriver
	honourCtx bool
	release   chan struct{}
}

func (d *stuckDriver) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	if p.Queue == "slow" {
		done := ctx.Done()
		if !d.honourCtx {
			done = nil
		}
		select {
		case <-done:
			return nil, ctx.Err()
		case <-d.release:
		}
	}
	return d.JobDriver.QueueStats(ctx, p)
}

// TestScrapeTimeout: a backend that does not answer cannot hold a scrape,
// whether it honours the context or not; the queues read are reported and
// the failure counted.
func TestScrapeTimeout(t *testing.T) {
	t.Parallel()
	for _, honour := range []bool{true, false} {
		t.Run(fmt.Sprintf("honourCtx=%v", honour), func(t *testing.T) {
			m, reg := setup(t, &batonprom.Config{ScrapeTimeout: 100 * time.Millisecond})
			d := &stuckDriver{JobDriver: batonmem.New(), honourCtx: honour, release: make(chan struct{})}
			t.Cleanup(func() { close(d.release) })
			client, err := baton.NewClient(d, &baton.Config{Logger: quiet})
			require.NoError(t, err)
			_, err = client.Insert(context.Background(), taskArgs{Do: "complete"}, &baton.InsertOpts{Queue: "fast"})
			require.NoError(t, err)
			m.CollectQueues(client, "fast", "slow")

			began := time.Now()
			got := gather(t, reg)
			require.Less(t, time.Since(began), 2*time.Second)
			require.Equal(t, 1.0, got[`baton_queue_scrape_errors_total`])
			require.NotContains(t, got, `baton_queue_paused{queue="slow"}`)
			if honour { // the fast queue was read before the slow one stuck
				require.Equal(t, 1.0, got[`baton_queue_jobs{queue="fast",state="available"}`])
			}
		})
	}
}

// TestRootImportsNoPrometheus: a program that imports only baton (or
// batonlock, or a driver) does not compile Prometheus.
func TestRootImportsNoPrometheus(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(goBin, "list", "-e", "-deps",
		"github.com/batonhq/baton",
		"github.com/batonhq/baton/batonlock",
		"github.com/batonhq/baton/batondriver/batonmem",
		"github.com/batonhq/baton/batondriver/batonredis",
	).CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/batonhq/baton")
	for _, d := range deps {
		require.NotContains(t, d, "prometheus", "%s is in the import graph of baton", d)
		require.NotEqual(t, "github.com/batonhq/baton/batonprom", d)
	}
}

// TestScrapeTimeoutCountsOnce: a scrape that runs out of time counts one
// error, as Config.ScrapeTimeout says, however many queues and sources were
// left to read after the one that stuck, and whether or not the backend
// honours the deadline; the queues after it are not read.
func TestScrapeTimeoutCountsOnce(t *testing.T) {
	t.Parallel()
	for _, honour := range []bool{true, false} {
		t.Run(fmt.Sprintf("honourCtx=%v", honour), func(t *testing.T) {
			m, reg := setup(t, &batonprom.Config{ScrapeTimeout: 100 * time.Millisecond})
			d := &stuckDriver{JobDriver: batonmem.New(), honourCtx: honour, release: make(chan struct{})}
			t.Cleanup(func() { close(d.release) })
			client, err := baton.NewClient(d, &baton.Config{Logger: quiet})
			require.NoError(t, err)
			other, err := baton.NewClient(batonmem.New(), &baton.Config{Logger: quiet})
			require.NoError(t, err)
			m.CollectQueues(client, "fast", "slow", "after-1", "after-2", "after-3")
			m.CollectQueues(other)

			for scrape := 1; scrape <= 2; scrape++ {
				got := gather(t, reg)
				require.Equal(t, float64(scrape), got[`baton_queue_scrape_errors_total`], "scrape %d", scrape)
				require.NotContains(t, got, `baton_queue_paused{queue="after-1"}`)
			}
		})
	}
}

package baton_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// twoProcesses returns two drivers on one backend, as two processes would
// have: on Redis each with a client of its own, under one prefix.
func twoProcesses(t *testing.T) (batondriver.JobDriver, batondriver.JobDriver) {
	t.Helper()
	t.Parallel()
	if _, ok := onRedis.Load(t); !ok {
		d := newJobDriver(t)
		return d, d
	}
	addr := redistest.SharedServer(t).Addr()
	prefix := fmt.Sprintf("proc%d", time.Now().UnixNano())
	return redisDriver(t, addr, prefix), redisDriver(t, addr, prefix)
}

// newProcessClient returns a client on d running emailArgs with cfg, which
// it completes (Workers and Logger set here if nil).
func newProcessClient(t *testing.T, d batondriver.JobDriver, cfg *baton.Config) *baton.Client {
	t.Helper()
	if cfg.Workers == nil {
		cfg.Workers = baton.NewWorkers()
		baton.AddWorker(cfg.Workers, baton.WorkFunc[emailArgs](noop), nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	c, err := baton.NewClient(d, cfg)
	require.NoError(t, err)
	return c
}

// processNamed returns the listed process named name, or nil.
func processNamed(t *testing.T, c *baton.Client, name string) *baton.ProcessInfo {
	t.Helper()
	list, err := c.ProcessList(context.Background())
	require.NoError(t, err)
	for _, p := range list {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func processNames(t *testing.T, c *baton.Client) []string {
	t.Helper()
	list, err := c.ProcessList(context.Background())
	require.NoError(t, err)
	require.NotNil(t, list)
	names := []string{}
	for _, p := range list {
		names = append(names, p.Name)
	}
	return names
}

func stopNow(t *testing.T, c *baton.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
}

// Two started clients on one backend each appear in the list with their
// queues and concurrency, from just after Start; each is gone the moment
// its Stop returns.
func TestProcessListTwoClients(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		d1, d2 := twoProcesses(t)
		billing := newProcessClient(t, d1, &baton.Config{
			ProcessName: "billing", Concurrency: 7,
			Queues: []baton.QueueConfig{{Name: "critical", Weight: 6, MaxWorkers: 4}, {Name: "default"}},
		})
		mailer := newProcessClient(t, d2, &baton.Config{
			ProcessName: "mailer", Concurrency: 3, StrictPriority: true,
			Queues: []baton.QueueConfig{{Name: "mail"}, {Name: "mail-low"}},
		})
		admin, err := baton.NewClient(d1, &baton.Config{Logger: quiet}) // insert-only: not listed
		require.NoError(t, err)
		require.Equal(t, []string{}, processNames(t, admin), "none started")

		started := time.Now()
		start(t, billing)
		start(t, mailer)
		require.Eventually(t, func() bool { return len(processNames(t, admin)) == 2 }, 5*time.Second, 10*time.Millisecond)
		host, err := os.Hostname()
		require.NoError(t, err)
		list, err := admin.ProcessList(context.Background())
		require.NoError(t, err)
		require.Len(t, list, 2)
		b, m := list[0], list[1]
		if b.Name != "billing" {
			b, m = m, b
		}
		require.Equal(t, "billing", b.Name)
		require.Equal(t, []baton.QueueConfig{{Name: "critical", Weight: 6, MaxWorkers: 4}, {Name: "default", Weight: 1}}, b.Queues, "weights filled in")
		require.False(t, b.StrictPriority)
		require.Equal(t, 7, b.Concurrency)
		require.Equal(t, "mailer", m.Name)
		require.Equal(t, []baton.QueueConfig{{Name: "mail", Weight: 1}, {Name: "mail-low", Weight: 1}}, m.Queues)
		require.True(t, m.StrictPriority)
		require.Equal(t, 3, m.Concurrency)
		require.NotEqual(t, b.ID, m.ID)
		for _, p := range list {
			require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{16}$`), p.ID)
			require.Equal(t, host, p.Host)
			require.Equal(t, os.Getpid(), p.PID)
			require.Zero(t, p.Busy)
			require.False(t, p.Stopping)
			require.WithinDuration(t, started, p.StartedAt, 2*time.Second)
			require.False(t, p.SeenAt.Before(p.StartedAt))
			require.WithinDuration(t, p.SeenAt.Add(30*time.Second), p.ExpiresAt, 5*time.Millisecond, "the default ProcessTTL")
		}

		stopNow(t, billing)
		require.Equal(t, []string{"mailer"}, processNames(t, admin), "gone at once when Stop returns")
		// A Stop whose context has ended removes the record all the same.
		ended, cancel := context.WithCancel(context.Background())
		cancel()
		_ = mailer.Stop(ended)
		require.Equal(t, []string{}, processNames(t, admin))

		// Started again, a client is a new record.
		start(t, billing)
		require.Eventually(t, func() bool { return processNamed(t, admin, "billing") != nil }, 5*time.Second, 10*time.Millisecond)
		require.NotEqual(t, b.ID, processNamed(t, admin, "billing").ID)
	})
}

// The busy count is the workers in use at the last beat; once Stop
// begins the process is marked stopping, and listed until its jobs are
// done.
func TestProcessBusyAndStopping(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		release := make(chan struct{})
		var running atomic.Int32
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, _ *baton.Job[emailArgs]) error {
			running.Add(1)
			select {
			case <-release:
			case <-ctx.Done(): // the test failed: its cleanup stops the client
			}
			return nil
		}), nil)
		c, _ := setup(t, nil, &baton.Config{Workers: workers, ProcessName: "busy", Concurrency: 4, ProcessTTL: 150 * time.Millisecond})
		start(t, c)
		for range 3 {
			_, err := c.Insert(context.Background(), emailArgs{}, nil)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return running.Load() == 3 }, 5*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool {
			p := processNamed(t, c, "busy")
			return p != nil && p.Busy == 3
		}, 5*time.Second, 10*time.Millisecond, "the next beat carries the busy workers")

		stopped := stopAsync(c, 10*time.Second)
		require.Eventually(t, func() bool {
			p := processNamed(t, c, "busy")
			return p != nil && p.Stopping && p.Busy == 3
		}, 5*time.Second, 5*time.Millisecond, "stopping, with its jobs still running")
		close(release)
		require.NoError(t, <-stopped)
		require.Nil(t, processNamed(t, c, "busy"), "removed when Stop returns")
	})
}

// countingProcesses counts the process calls that reach the backend.
type countingProcesses struct {
	batondriver.JobDriver
	beats, removes atomic.Int32
}

func (d *countingProcesses) ProcessBeat(ctx context.Context, p *batondriver.ProcessBeatParams) (*batondriver.ProcessBeatResult, error) {
	d.beats.Add(1)
	return d.JobDriver.ProcessBeat(ctx, p)
}

func (d *countingProcesses) ProcessRemove(ctx context.Context, p *batondriver.ProcessRemoveParams) error {
	d.removes.Add(1)
	return d.JobDriver.ProcessRemove(ctx, p)
}

// Beats go out on their timer, never per job: a client that runs a few
// hundred jobs between two beats beats once at Start, at most once more as
// Stop begins, and removes its record once.
func TestProcessBeatsPerIntervalNotPerJob(t *testing.T) {
	t.Parallel()
	d := &countingProcesses{JobDriver: newJobDriver(t)}
	workers, done := countingWorkers[emailArgs](nil)
	c := newProcessClient(t, d, &baton.Config{Workers: workers, Concurrency: 8, ProcessTTL: time.Hour})
	require.NoError(t, c.Start(context.Background()))
	require.Eventually(t, func() bool { return d.beats.Load() == 1 }, 5*time.Second, time.Millisecond, "the beat at Start")
	jobs := make([]*baton.InsertManyParams, 300)
	for i := range jobs {
		jobs[i] = &baton.InsertManyParams{Args: emailArgs{}}
	}
	_, err := c.InsertMany(context.Background(), jobs)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return done.Load() == 300 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, int32(1), d.beats.Load(), "no beat per job")
	stopNow(t, c)
	// One more as Stop begins, marked stopping, unless Stop is done first.
	require.LessOrEqual(t, d.beats.Load(), int32(2))
	require.Equal(t, int32(1), d.removes.Load())
}

// cuttableProcesses fails every process call while cut, as a backend
// that cannot be reached would.
type cuttableProcesses struct {
	batondriver.JobDriver
	cut atomic.Bool
}

var errCut = errors.New("connection refused (test)")

func (d *cuttableProcesses) ProcessBeat(ctx context.Context, p *batondriver.ProcessBeatParams) (*batondriver.ProcessBeatResult, error) {
	if d.cut.Load() {
		return nil, errCut
	}
	return d.JobDriver.ProcessBeat(ctx, p)
}

func (d *cuttableProcesses) ProcessRemove(ctx context.Context, p *batondriver.ProcessRemoveParams) error {
	if d.cut.Load() {
		return errCut
	}
	return d.JobDriver.ProcessRemove(ctx, p)
}

// logRecords keeps the messages logged at each level.
type logRecords struct {
	mu   sync.Mutex
	msgs map[slog.Level][]string
}

func (l *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecords) WithGroup(string) slog.Handler            { return l }
func (l *logRecords) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msgs == nil {
		l.msgs = map[slog.Level][]string{}
	}
	l.msgs[r.Level] = append(l.msgs[r.Level], r.Message)
	return nil
}

// count is how many messages at level hold part.
func (l *logRecords) count(level slog.Level, part string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs[level] {
		if strings.Contains(m, part) {
			n++
		}
	}
	return n
}

// A process whose beats cannot reach the backend drops out of the list
// once its record expires, and is listed again, as a new record, when its
// beats arrive again. Meanwhile its jobs run as ever, and one warning is
// logged for the whole outage.
func TestProcessCutOffDropsOut(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		d := &cuttableProcesses{JobDriver: newJobDriver(t)}
		logs := &logRecords{}
		const ttl = 150 * time.Millisecond
		workers, done := countingWorkers[emailArgs](nil)
		c := newProcessClient(t, d, &baton.Config{Workers: workers, ProcessName: "p", ProcessTTL: ttl, Logger: slog.New(logs)})
		start(t, c)
		require.Eventually(t, func() bool { return processNamed(t, c, "p") != nil }, 5*time.Second, 5*time.Millisecond)
		first := processNamed(t, c, "p")

		d.cut.Store(true)
		cut := time.Now()
		require.Eventually(t, func() bool { return processNamed(t, c, "p") == nil }, 5*time.Second, 5*time.Millisecond)
		require.GreaterOrEqual(t, time.Since(cut), ttl/3, "listed until its record expired")
		_, err := c.Insert(context.Background(), emailArgs{}, nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return done.Load() == 1 }, 5*time.Second, 5*time.Millisecond, "jobs run while beats fail")
		time.Sleep(ttl) // a few more failed beats
		require.Equal(t, 1, logs.count(slog.LevelWarn, "list of live processes failed"), "one warning for the outage")
		require.GreaterOrEqual(t, logs.count(slog.LevelDebug, "process beat failed again"), 1)

		d.cut.Store(false)
		require.Eventually(t, func() bool { return processNamed(t, c, "p") != nil }, 5*time.Second, 5*time.Millisecond)
		again := processNamed(t, c, "p")
		require.Equal(t, first.ID, again.ID, "the same process")
		require.True(t, again.StartedAt.After(first.StartedAt), "its record started anew")
		require.Eventually(t, func() bool { return logs.count(slog.LevelInfo, "recorded in the list of live processes again") == 1 },
			time.Second, 5*time.Millisecond)

		// A Stop that cannot remove the record returns all the same, and
		// logs it; the record expires.
		d.cut.Store(true)
		stopNow(t, c)
		require.Equal(t, 1, logs.count(slog.LevelWarn, "removing this process"))
		require.Eventually(t, func() bool { return processNamed(t, c, "p") == nil }, 5*time.Second, 5*time.Millisecond)
	})
}

func init() { children["processbeater"] = runProcessBeater }

// runProcessBeater is a started client that works until killed, with a
// short ProcessTTL.
func runProcessBeater() int {
	d, _, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](noop), nil)
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, ProcessName: "doomed", ProcessTTL: 600 * time.Millisecond, Logger: quiet})
	return childServe(c, err)
}

// A process killed with SIGKILL cannot remove its record: it stays listed
// until its ProcessTTL has passed since its last beat, then drops out.
func TestProcessKilledDropsOut(t *testing.T) {
	t.Parallel()
	srv := redistest.SharedServer(t)
	prefix := fmt.Sprintf("killed%d", time.Now().UnixNano())
	c, err := baton.NewClient(redisDriver(t, srv.Addr(), prefix), &baton.Config{Logger: quiet})
	require.NoError(t, err)
	child := startChild(t, "processbeater", srv.Addr(), prefix, os.DevNull)
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	var p *baton.ProcessInfo
	require.Eventually(t, func() bool { p = processNamed(t, c, "doomed"); return p != nil }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, child.Process.Pid, p.PID)

	require.NoError(t, child.Process.Signal(syscall.SIGKILL))
	_ = child.Wait()
	killed := time.Now()
	p = processNamed(t, c, "doomed")
	require.NotNil(t, p, "still listed just after the kill: nothing removed it")
	last := p.SeenAt
	require.Eventually(t, func() bool { return processNamed(t, c, "doomed") == nil }, 5*time.Second, 10*time.Millisecond)
	gone := time.Now()
	require.Less(t, gone.Sub(killed), 600*time.Millisecond+time.Second, "gone within its TTL")
	require.False(t, gone.Before(last.Add(600*time.Millisecond)), "not before its TTL since its last beat")
}

// NewClient refuses a ProcessTTL or a ProcessName that the list cannot
// take.
func TestProcessConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  baton.Config
		want string
	}{
		{baton.Config{ProcessTTL: -time.Second}, "ProcessTTL"},
		{baton.Config{ProcessTTL: 29 * time.Millisecond}, "ProcessTTL"},
		{baton.Config{ProcessName: strings.Repeat("n", 129)}, "ProcessName"},
		{baton.Config{ProcessName: "\xff"}, "ProcessName"},
	} {
		_, err := baton.NewClient(newJobDriver(t), &c.cfg)
		require.ErrorContains(t, err, c.want, "%+v", c.cfg)
	}
	for _, cfg := range []baton.Config{
		{ProcessTTL: 30 * time.Millisecond},
		{ProcessName: strings.Repeat("é", 64)},
	} {
		_, err := baton.NewClient(newJobDriver(t), &cfg)
		require.NoError(t, err)
	}
}

func TestProcessInfoWorks(t *testing.T) {
	p := &baton.ProcessInfo{Queues: []baton.QueueConfig{{Name: "critical"}, {Name: "default"}}}
	require.True(t, p.Works("default"))
	require.False(t, p.Works("low"))
	require.False(t, (&baton.ProcessInfo{}).Works("default"))
}

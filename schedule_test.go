package baton_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/internal/redistest"
)

func TestScheduleSpecs(t *testing.T) {
	t.Parallel()
	_, err := baton.Cron("61 * * * *")
	require.ErrorContains(t, err, `baton: cron spec "61 * * * *"`)
	_, err = baton.Cron("0 0 30 2 *")
	require.ErrorContains(t, err, `baton: cron spec "0 0 30 2 *" matches no date`)
	_, err = baton.Every(time.Millisecond)
	require.ErrorContains(t, err, "at least 10ms")

	every, err := baton.Every(15 * time.Minute)
	require.NoError(t, err)
	at := time.Date(2026, 11, 22, 10, 7, 30, 0, time.UTC)
	require.Equal(t, time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC), every.Next(at))
	require.Equal(t, time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC), every.Next(every.Next(at)))

	cron, err := baton.Cron("0,15,30,45 * * * *")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC), cron.Next(at))

	// "@every d" ticks as Every(d) does, whenever the process started: two
	// processes that start at different times compute the same ticks.
	cronEvery, err := baton.Cron("@every 15m")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC), cronEvery.Next(at).UTC())
	require.Equal(t, time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC), cronEvery.Next(at.Add(-5*time.Minute+17*time.Second)).UTC())
	require.Equal(t, "@every 15m", cronEvery.(fmt.Stringer).String())

	// Every ticks at multiples of its period since the Unix epoch, as its
	// doc says, also for a period that does not divide a day: weekly on
	// Thursdays at 00:00 UTC (1 January 1970 was a Thursday), every 7
	// minutes at 7-minute multiples of Unix time.
	weekly, err := baton.Every(7 * 24 * time.Hour)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC), weekly.Next(at).UTC(), "22 November 2026 is a Sunday")
	require.Equal(t, time.Date(1970, 1, 8, 0, 0, 0, 0, time.UTC), weekly.Next(time.Unix(0, 0)).UTC())
	sevenMin, err := baton.Every(7 * time.Minute)
	require.NoError(t, err)
	for _, from := range []time.Time{at, time.Unix(0, 0), time.Unix(-1, 0), time.Date(2500, 1, 1, 0, 0, 0, 0, time.UTC)} {
		next := sevenMin.Next(from)
		require.True(t, next.After(from) && !next.After(from.Add(7*time.Minute)), "Next(%v) = %v", from, next)
		require.Zero(t, next.Unix()%(7*60), "Next(%v) = %v is no multiple of 7m since the Unix epoch", from, next)
		require.Zero(t, next.Nanosecond())
	}

	job := func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return emailArgs{}, nil }
	for _, tc := range []struct {
		jobs []*baton.PeriodicJob
		want string
	}{
		{[]*baton.PeriodicJob{nil}, "PeriodicJobs[0] is nil"},
		{[]*baton.PeriodicJob{{Schedule: every, Job: job}}, "name"},
		{[]*baton.PeriodicJob{{Name: "a", Job: job}}, `"a" has no Schedule`},
		{[]*baton.PeriodicJob{{Name: "a", Schedule: every}}, `"a" has no Job`},
		{[]*baton.PeriodicJob{{Name: "a", Schedule: every, Job: job}, {Name: "a", Schedule: every, Job: job}}, `"a" used twice`},
	} {
		_, err := baton.NewClient(batonmemDriver(), &baton.Config{PeriodicJobs: tc.jobs})
		require.ErrorContains(t, err, tc.want)
	}
}

func init() { children["cronworker"] = runCronWorker }

// runCronWorker is a process running the fan-out schedule on Redis: it logs
// "<tick> <pid>" for every tick's job it runs, and works until killed.
func runCronWorker() int {
	d, f, err := childSetup()
	if err != nil {
		return childFailed(err)
	}
	every, _ := baton.Every(cronEvery)
	var mu sync.Mutex
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		_, err := fmt.Fprintf(f, "%s %d\n", job.Args.To, os.Getpid())
		return err
	}), nil)
	c, err := baton.NewClient(d, &baton.Config{
		Workers: workers, Logger: quiet,
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "fan-out", Schedule: every,
			Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return emailArgs{To: strconv.FormatInt(tick.UnixMilli(), 10)}, nil
			},
		}},
	})
	return childServe(c, err)
}

// cronEvery is the cron workers' interval: long enough that all three
// processes stalling past a tick at once (the catch-up policy then skips
// it: docs/job-states.md) takes more than a loaded CI machine.
const cronEvery = 200 * time.Millisecond

// Three OS processes run the same schedule on one Redis; every tick is
// inserted, and run, exactly once.
func TestPeriodicJobFiresOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	addr := redistest.SharedServer(t).Addr()
	prefix := fmt.Sprintf("cron%d", time.Now().UnixNano())
	logPath := filepath.Join(t.TempDir(), "ticks.log")
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	})
	for range 3 {
		procs = append(procs, startChild(t, "cronworker", addr, prefix, logPath))
	}
	started := time.Now()
	time.Sleep(12 * cronEvery)
	for _, p := range procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
	procs = nil

	data, err := os.ReadFile(logPath)
	require.NoError(t, err)
	runs := map[int64]int{}
	pids := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		fields := strings.Fields(line)
		require.Len(t, fields, 2, "log line %q", line)
		tick, err := strconv.ParseInt(fields[0], 10, 64)
		require.NoError(t, err)
		runs[tick]++
		pids[fields[1]] = true
	}
	var ticks []int64
	for tick, n := range runs {
		require.Equal(t, 1, n, "tick %d ran %d times", tick, n)
		ticks = append(ticks, tick)
	}
	slices.Sort(ticks)
	require.GreaterOrEqual(t, len(ticks), 10, "ticks: %v", ticks)
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, cronEvery.Milliseconds(), ticks[i]-ticks[i-1], "a tick was skipped between %d and %d", ticks[i-1], ticks[i])
	}
	require.Less(t, time.UnixMilli(ticks[0]).Sub(started), 2*cronEvery, "the first tick came late")
	t.Logf("%d ticks, each run once, by %d processes", len(ticks), len(pids))
}

// stallingSchedule ticks every `every`, and the first time it is asked
// for the tick after its first one it takes `stall` to answer: the client
// that asks stalls right after waking for its first tick, as a process
// paused by its host would.
type stallingSchedule struct {
	every, stall time.Duration
	first        atomic.Pointer[time.Time]
	stalled      atomic.Bool
}

func (s *stallingSchedule) Next(t time.Time) time.Time {
	next := t.Truncate(s.every).Add(s.every)
	if s.first.CompareAndSwap(nil, &next) {
		return next
	}
	if t.Equal(*s.first.Load()) && s.stalled.CompareAndSwap(false, true) {
		time.Sleep(s.stall)
	}
	return next
}

// A client that wakes for a tick only after the next one is due fires the
// latest tick due, within its turn, and not the tick whose turn is over.
func TestStalledScheduleFiresTheLatestTickDue(t *testing.T) {
	t.Parallel()
	// The stall leaves the client 300ms after the next tick before the one
	// after it is due: at 200ms and 250ms (50ms), a loaded machine once
	// woke it after that one too.
	s := &stallingSchedule{every: 400 * time.Millisecond, stall: 500 * time.Millisecond}
	type fired struct{ tick, at time.Time }
	firedc := make(chan fired, 100)
	skips := make(chan map[string]slog.Value, 10)
	logger := slog.New(&hookHandler{fn: func(r slog.Record) {
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		if _, ok := attrs["skipped"]; ok && r.Level == slog.LevelWarn {
			skips <- attrs
		}
	}})
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
	c, err := baton.NewClient(batonmem.New(), &baton.Config{Workers: w, Logger: logger, PeriodicJobs: []*baton.PeriodicJob{{
		Name: "stalling", Schedule: s,
		Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
			firedc <- fired{tick, time.Now()}
			return emailArgs{}, nil
		},
	}}})
	require.NoError(t, err)
	start(t, c)
	var got []fired
	for len(got) < 3 {
		select {
		case f := <-firedc:
			got = append(got, f)
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d ticks fired: %v", len(got), got)
		}
	}
	first := *s.first.Load()
	require.True(t, s.stalled.Load())
	require.Equal(t, first.Add(s.every), got[0].tick,
		"after the stall, the first tick fired is the latest due (the first tick's turn was over)")
	for i, f := range got {
		require.Equal(t, got[0].tick.Add(time.Duration(i)*s.every), f.tick, "ticks fired: %v", got)
		require.Less(t, f.at.Sub(f.tick), s.every, "tick %v fired after its turn", f.tick)
	}
	// The skipped tick is logged, with what a reader needs to find it.
	select {
	case attrs := <-skips:
		require.Equal(t, "stalling", attrs["periodic_job"].String())
		require.EqualValues(t, 1, attrs["skipped"].Int64())
		require.True(t, first.Equal(attrs["first_skipped"].Time()), "first_skipped %v, want %v", attrs["first_skipped"], first)
		require.True(t, first.Equal(attrs["last_skipped"].Time()), "last_skipped %v, want %v", attrs["last_skipped"], first)
		require.True(t, got[0].tick.Equal(attrs["fires"].Time()), "fires %v, want %v", attrs["fires"], got[0].tick)
	default:
		t.Fatal("the skipped tick was not logged")
	}
	require.Empty(t, skips, "only the stall skipped a tick")
}

// lateSchedule has a single tick, at, and its String (which the client's
// schedule goroutine reads first of all, for its registration) waits for
// gate: it holds that goroutine back, as a loaded machine would.
type lateSchedule struct {
	at   atomic.Pointer[time.Time]
	gate chan struct{}
}

func (s *lateSchedule) String() string { <-s.gate; return "once, late" }

func (s *lateSchedule) Next(t time.Time) time.Time {
	if at := s.at.Load(); at != nil && t.Before(*at) {
		return *at
	}
	return time.Time{}
}

// A tick due after Start but before the schedule's goroutine first ran is
// fired: the first tick is the first after Start, not after the goroutine
// ran. (Counted from the goroutine, it would have no tick left, and say so.)
func TestScheduleFiresTickDueBeforeItsGoroutineRan(t *testing.T) {
	t.Parallel()
	s := &lateSchedule{gate: make(chan struct{})}
	var once sync.Once
	release := func() { once.Do(func() { close(s.gate) }) }
	fired := make(chan time.Time, 1)
	noTick := make(chan struct{})
	var logged sync.Once
	log := slog.New(&hookHandler{fn: func(r slog.Record) {
		if strings.Contains(r.Message, "no next tick") {
			logged.Do(func() { close(noTick) })
		}
	}})
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
	c, err := baton.NewClient(batonmem.New(), &baton.Config{Workers: w, Logger: log, PeriodicJobs: []*baton.PeriodicJob{{
		Name: "late", Schedule: s,
		Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
			fired <- tick
			return emailArgs{}, nil
		},
	}}})
	require.NoError(t, err)
	start(t, c)
	t.Cleanup(release) // before Stop (cleanups run last first)

	// The tick falls after Start returned and passes while the goroutine
	// is held; only then is it let go.
	at := time.Now().Add(time.Millisecond)
	s.at.Store(&at)
	<-time.After(time.Until(at))
	for !time.Now().After(at) {
		<-time.After(time.Millisecond)
	}
	release()

	select {
	case tick := <-fired:
		require.Equal(t, at, tick)
	case <-noTick:
		t.Fatal("the tick due between Start and the schedule goroutine's first run was skipped")
	case <-time.After(5 * time.Second):
		t.Fatal("the tick did not fire")
	}
}

// neverSchedule has no next tick, as a Schedule of the user's may have
// (Cron refuses a spec that matches no date).
type neverSchedule struct{}

func (neverSchedule) Next(time.Time) time.Time { return time.Time{} }

// A schedule with no next tick never fires: the client logs that, inserts
// nothing, and the schedule does not keep Stop from returning.
func TestScheduleThatNeverFires(t *testing.T) {
	t.Parallel()
	var never neverSchedule
	var fired atomic.Int32
	logged := make(chan struct{})
	var once sync.Once
	log := slog.New(&hookHandler{fn: func(r slog.Record) {
		if strings.Contains(r.Message, "no next tick") {
			once.Do(func() { close(logged) })
		}
	}})
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
	c, err := baton.NewClient(batonmem.New(), &baton.Config{Workers: w, Logger: log, PeriodicJobs: []*baton.PeriodicJob{{
		Name: "never", Schedule: never,
		Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
			fired.Add(1)
			return emailArgs{}, nil
		},
	}}})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	select {
	case <-logged:
	case <-time.After(5 * time.Second):
	}
	require.Zero(t, fired.Load(), "a schedule that matches no date fired")
	stopped := stopAsync(c, 5*time.Second)
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return: the schedule's goroutine spins")
	}
	select {
	case <-logged:
	default:
		t.Fatal("the schedule that never fires was not logged")
	}
}

// hookHandler is a slog.Handler that calls fn with every record.
type hookHandler struct{ fn func(slog.Record) }

func (h *hookHandler) Enabled(context.Context, slog.Level) bool      { return true }
func (h *hookHandler) Handle(_ context.Context, r slog.Record) error { h.fn(r); return nil }
func (h *hookHandler) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h *hookHandler) WithGroup(string) slog.Handler                 { return h }

// A cron spec in a zone with daylight saving time that does not fire every
// hour fires once a day as the clock reads it: a wall-clock time that
// occurs twice when clocks go back fires at its first occurrence only, and
// one skipped when clocks go forward fires at the moment they do. A spec
// that fires every hour follows the clock as it goes.
func TestCronDaylightSaving(t *testing.T) {
	t.Parallel()
	utc := func(y int, m time.Month, d, h, min int) time.Time { return time.Date(y, m, d, h, min, 0, 0, time.UTC) }
	ticks := func(spec string, from time.Time, n int) []time.Time {
		s, err := baton.Cron(spec)
		require.NoError(t, err)
		var out []time.Time
		for range n {
			from = s.Next(from)
			out = append(out, from.UTC())
		}
		return out
	}
	for _, tc := range []struct {
		spec string
		from time.Time
		want []time.Time
	}{
		// New York falls back at 06:00 UTC on 3 November 2024 (2:00 EDT to
		// 1:00 EST): 1:30 occurs at 05:30 and 06:30 UTC.
		{"CRON_TZ=America/New_York 30 1 * * *", utc(2024, 11, 2, 12, 0), []time.Time{utc(2024, 11, 3, 5, 30), utc(2024, 11, 4, 6, 30)}},
		// It springs forward at 07:00 UTC on 10 March 2024 (2:00 EST to
		// 3:00 EDT): 2:30 does not occur and fires at 3:00 EDT.
		{"CRON_TZ=America/New_York 30 2 * * *", utc(2024, 3, 9, 12, 0), []time.Time{utc(2024, 3, 10, 7, 0), utc(2024, 3, 11, 6, 30)}},
		// Berlin: forward at 01:00 UTC on 31 March 2024, back at 01:00 UTC
		// on 27 October 2024.
		{"CRON_TZ=Europe/Berlin 30 2 * * *", utc(2024, 3, 30, 12, 0), []time.Time{utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 30)}},
		{"CRON_TZ=Europe/Berlin 30 2 * * *", utc(2024, 10, 26, 12, 0), []time.Time{utc(2024, 10, 27, 0, 30), utc(2024, 10, 28, 1, 30)}},
		{"CRON_TZ=Europe/Berlin */20 2 * * *", utc(2024, 10, 26, 12, 0), []time.Time{utc(2024, 10, 27, 0, 0), utc(2024, 10, 27, 0, 20), utc(2024, 10, 27, 0, 40), utc(2024, 10, 28, 1, 0)}},
		{"CRON_TZ=Europe/Berlin */20 2 * * *", utc(2024, 3, 30, 12, 0), []time.Time{utc(2024, 3, 31, 1, 0), utc(2024, 4, 1, 0, 0)}},
		// Every hour: both 1:00s, and no 2:00 when there is none.
		{"CRON_TZ=America/New_York 0 * * * *", utc(2024, 11, 3, 4, 30), []time.Time{utc(2024, 11, 3, 5, 0), utc(2024, 11, 3, 6, 0), utc(2024, 11, 3, 7, 0)}},
		{"CRON_TZ=America/New_York 0 * * * *", utc(2024, 3, 10, 5, 30), []time.Time{utc(2024, 3, 10, 6, 0), utc(2024, 3, 10, 7, 0), utc(2024, 3, 10, 8, 0)}},
	} {
		require.Equal(t, tc.want, ticks(tc.spec, tc.from, len(tc.want)), "%s from %v", tc.spec, tc.from)
	}

	// A daily spec fires once on every day of the year, whatever its time.
	for _, zone := range []string{"America/New_York", "Europe/Berlin", "Australia/Sydney"} {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		for _, at := range []string{"0 0", "30 1", "30 2", "0 3"} {
			spec := "CRON_TZ=" + zone + " " + at + " * * *"
			days := map[string]int{}
			for _, tick := range ticks(spec, time.Date(2024, 1, 1, 12, 0, 0, 0, loc), 365) {
				days[tick.In(loc).Format(time.DateOnly)]++
			}
			for day, n := range days {
				require.Equal(t, 1, n, "%s fired %d times on %s", spec, n, day)
			}
			require.Len(t, days, 365, "%s skipped a day", spec)
		}
	}
}

// lateOnce delays a schedule's insert of its first tick past the next
// tick, as a slow process would.
type lateOnce struct {
	batondriver.JobDriver
	delay time.Duration
	first atomic.Bool
}

func (d *lateOnce) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if p.Once != nil && d.first.CompareAndSwap(false, true) {
		time.Sleep(d.delay)
		ctx = context.WithoutCancel(ctx)
	}
	return d.JobDriver.JobInsert(ctx, p)
}

// A client whose insert of a tick comes after another client inserted a
// later tick logs it at Warn (late_tick, last_tick): the tick was inserted
// before by someone else, or by nobody, and either way it leaves a trace.
func TestLateTickLogged(t *testing.T) {
	t.Parallel()
	const every = 200 * time.Millisecond
	sched, err := baton.Every(every)
	require.NoError(t, err)
	shared := batonmem.New()
	lates := make(chan map[string]slog.Value, 10)
	periodic := []*baton.PeriodicJob{{Name: "late", Schedule: sched,
		Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return emailArgs{}, nil }}}
	newClient := func(d batondriver.JobDriver, logger *slog.Logger) *baton.Client {
		w := baton.NewWorkers()
		baton.AddWorker(w, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }), nil)
		c, err := baton.NewClient(d, &baton.Config{Workers: w, Logger: logger, PeriodicJobs: periodic})
		require.NoError(t, err)
		return c
	}
	slow := newClient(&lateOnce{JobDriver: shared, delay: every * 5 / 2}, slog.New(&hookHandler{fn: func(r slog.Record) {
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		if _, ok := attrs["late_tick"]; ok && r.Level == slog.LevelWarn {
			lates <- attrs
		}
	}}))
	start(t, slow)
	start(t, newClient(shared, quiet))
	select {
	case attrs := <-lates:
		late, last := attrs["late_tick"].Time(), attrs["last_tick"].Time()
		require.True(t, last.After(late), "late_tick %v, last_tick %v", late, last)
		require.Zero(t, last.Sub(late)%every, "a later tick of the schedule was inserted first")
	case <-time.After(5 * time.Second):
		t.Fatal("the late tick was not logged")
	}
}

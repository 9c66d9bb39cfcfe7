package demo

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// scale runs the scenario ten times faster: about 2 seconds.
const scale = 0.1

// setup returns a fresh driver of each backend, by name.
func setup(t *testing.T) map[string]func(t *testing.T) batondriver.Driver {
	return map[string]func(t *testing.T) batondriver.Driver{
		"memory": func(*testing.T) batondriver.Driver { return batonmem.New() },
		"redis": func(t *testing.T) batondriver.Driver {
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.SharedServer(t).Addr()}})
			require.NoError(t, err)
			t.Cleanup(client.Close)
			d, err := batonredis.New(client, &batonredis.Config{Prefix: fmt.Sprintf("demo-test-%d", time.Now().UnixNano())})
			require.NoError(t, err)
			t.Cleanup(d.Close)
			return d
		},
	}
}

// requireChecks requires every check to hold but those named in failing,
// which must fail.
func requireChecks(t *testing.T, res *Result, out string, failing ...string) {
	t.Helper()
	require.Len(t, res.Checks, 6, out)
	for _, c := range res.Checks {
		want := false
		for _, f := range failing {
			want = want || strings.Contains(c.Name, f)
		}
		require.Equal(t, !want, c.OK, "%s: %s\n%s", c.Name, c.Detail, out)
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()
	for name, newDriver := range setup(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			res, err := Run(context.Background(), newDriver(t), &out, &Config{Scale: scale, Backend: name})
			require.NoError(t, err, out.String())
			requireChecks(t, res, out.String())
			require.Greater(t, res.Processed, 400)
			require.Positive(t, res.Dropped)
			require.GreaterOrEqual(t, res.Retried, 2) // the charge's, at least
			require.NotEmpty(t, res.Handoffs)
			require.Positive(t, res.ParkedPeak)

			s := out.String()
			require.Contains(t, s, "Baton demo on "+name)
			require.Equal(t, 6, strings.Count(s, "  PASS  "), s)
			require.Contains(t, s, "All 6 guarantees held.")
			require.NotContains(t, s, "\x1b[", "plain output has no escape sequences")
			for _, line := range strings.Split(s, "\n") {
				if !strings.Contains(line, " | ") { // the progress lines for logs may be long
					require.LessOrEqual(t, len([]rune(line)), 80, "line too wide: %q", line)
				}
			}
		})
	}
}

// TestSabotage breaks a guarantee on purpose: the demo must see it, say
// FAIL, and return ErrGuarantee.
func TestSabotage(t *testing.T) {
	t.Parallel()
	for sabotage, failing := range map[string]string{
		"limit":  "max concurrency per key",
		"halt":   "the halted key ran nothing",
		"twin":   "every twin of a running sync was dropped",
		"retry":  "3rd attempt",
		"fanout": "the fan-out fired once per tick",
	} {
		t.Run(sabotage, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			res, err := Run(context.Background(), batonmem.New(), &out, &Config{Scale: scale, Sabotage: sabotage})
			require.ErrorIs(t, err, ErrGuarantee, out.String())
			requireChecks(t, res, out.String(), failing)
			require.Regexp(t, "  FAIL  .*"+regexp.QuoteMeta(failing), out.String())
			require.Contains(t, out.String(), "FAILED: 1 of 6 guarantees did not hold.")
		})
	}
}

// TestLiveAndDash runs the demo as on a terminal, in color, with the
// dashboard, which must answer while it runs.
func TestLiveAndDash(t *testing.T) {
	t.Parallel()
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), batonmem.New(), out, &Config{Scale: scale, Live: true, Color: true, Dash: "127.0.0.1:0"})
		done <- err
	}()
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+/`)
	var page string
	require.Eventually(t, func() bool { page = url.FindString(out.String()); return page != "" }, 5*time.Second, 5*time.Millisecond)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(page + "queues/webhooks")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), "webhooks")

	require.NoError(t, <-done, out.String())
	s := out.String()
	require.Contains(t, s, "\x1b[?25l", "the cursor is hidden while redrawing")
	require.Contains(t, s, "\x1b[?25h", "and shown again")
	require.Regexp(t, `\x1b\[\d+A`, s, "the progress is redrawn in place")
	require.Contains(t, s, "\x1b[32mPASS\x1b[0m")
	_, err = client.Get(page)
	require.Error(t, err, "the dashboard closes with the demo")
}

func TestInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	var out bytes.Buffer
	start := time.Now()
	_, err := Run(ctx, batonmem.New(), &out, &Config{Scale: scale})
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 5*time.Second)
	require.NotContains(t, out.String(), "Guarantees")
}

func TestBadConfig(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), batonmem.New(), io.Discard, &Config{Scale: -1})
	require.ErrorContains(t, err, "scale")
	_, err = Run(context.Background(), batonmem.New(), io.Discard, &Config{Sabotage: "everything"})
	require.ErrorContains(t, err, "unknown sabotage")
	_, err = Run(context.Background(), batonmem.New(), io.Discard, &Config{Scale: scale, Dash: "127.0.0.1:99999"})
	require.ErrorContains(t, err, "dashboard")
}

func TestLocks(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	err := RunLocks(context.Background(), batonmem.New(), &out, &LocksConfig{Users: 3, Webhooks: 30, Section: 10 * time.Millisecond})
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "All guarantees held.")
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var d []time.Duration
	require.Equal(t, "–", latency(d, 0.5))
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*100*time.Microsecond)
	}
	require.Equal(t, "5.0ms", latency(d, 0.50))
	require.Equal(t, "9.9ms", latency(d, 0.99))
	require.Equal(t, "0.10ms", latency(d[:1], 0.99))
	require.Equal(t, "1.5s", latency([]time.Duration{1500 * time.Millisecond}, 0.5))
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stuckDriver reports a job of the billing queue that never ends, and
// inserts the job of each schedule tick late, as a busy machine does.
type stuckDriver struct{ batondriver.Driver }

// lateTick is how late stuckDriver inserts a tick's job: 40% of the
// fan-out's period at the test's scale, so that giving up at any moment
// would often stop the workers between a tick and its fan-out.
const lateTick = 100 * time.Millisecond

// JobInsert inserts a tick's job lateTick late, and then even if the
// caller's deadline (the next tick) has passed meanwhile, as a backend
// may: the fault delays a tick, and loses none when the machine is busy.
func (d stuckDriver) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if p.Once != nil {
		time.Sleep(lateTick)
		ctx = context.WithoutCancel(ctx)
	}
	return d.Driver.JobInsert(ctx, p)
}

func (d stuckDriver) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	res, err := d.Driver.QueueStats(ctx, p)
	if err == nil && p.Queue == queueBilling {
		res.Counts[batondriver.JobStateRunning]++
	}
	return res, err
}

// TestDrainGivesUp: when a job never ends, the demo gives up waiting, says
// so, fails the check, and does not also claim that every job ended; it
// stops between two ticks of the fan-out, their jobs late as they are on a
// busy machine, so that the fan-out's check holds. It gives up after a
// second, not the ten seconds a run waits: every tick of the fan-out in
// that time must fire for the check to hold, and on a stalled machine the
// schedule skips a tick whose next one is due.
func TestDrainGivesUp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	res, err := Run(context.Background(), stuckDriver{batonmem.New()}, &out, &Config{Scale: scale, giveUpAfter: time.Second})
	require.ErrorIs(t, err, ErrGuarantee, out.String())
	requireChecks(t, res, out.String(), "terminal state")
	require.Contains(t, out.String(), "gave up waiting for every job to end")
	require.NotContains(t, out.String(), "every job has ended", "after giving up on them")
}

// tickFault makes the insert of one fan-out tick, the third one asked
// for, misbehave in every process: stall, as a process paused past the
// next tick would (so that both processes skip the tick after it), fail
// as an insert that did not finish before the next tick (so that both
// give it up), or lose, answering as if another process had inserted it.
type tickFault struct {
	batondriver.Driver
	stall  time.Duration // else give up, or else lose
	giveUp bool
	mu     sync.Mutex
	seen   []time.Time
}

func (d *tickFault) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if p.Once != nil {
		d.mu.Lock()
		if !slices.ContainsFunc(d.seen, p.Once.Tick.Equal) {
			d.seen = append(d.seen, p.Once.Tick)
		}
		hit := len(d.seen) == 3 && d.seen[2].Equal(p.Once.Tick)
		d.mu.Unlock()
		switch {
		case hit && d.stall > 0:
			time.Sleep(d.stall)
			ctx = context.WithoutCancel(ctx)
		case hit && d.giveUp:
			return nil, context.DeadlineExceeded
		case hit:
			return &batondriver.JobInsertResult{Skipped: true}, nil
		}
	}
	return d.Driver.JobInsert(ctx, p)
}

// TestFanoutSkippedTicks: a tick that no process fired holds the fan-out's
// check only if every process logged it skipped, stalled past it (the
// schedule's catch-up policy), or given up; a tick lost without a trace
// fails it.
func TestFanoutSkippedTicks(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		stall   time.Duration
		giveUp  bool
		failing []string
	}{
		"stalled":  {stall: 700 * time.Millisecond}, // over two periods of 250ms
		"given up": {giveUp: true},
		"lost":     {failing: []string{"the fan-out fired once per tick"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			res, err := Run(context.Background(), &tickFault{Driver: batonmem.New(), stall: tc.stall, giveUp: tc.giveUp}, &out, &Config{Scale: scale})
			if tc.failing == nil {
				require.NoError(t, err, out.String())
			} else {
				require.ErrorIs(t, err, ErrGuarantee, out.String())
			}
			requireChecks(t, res, out.String(), tc.failing...)
			for _, c := range res.Checks {
				if strings.Contains(c.Name, "fan-out") {
					if tc.failing == nil {
						require.Regexp(t, `; \d+ ticks? skipped by both processes`, c.Detail)
					} else {
						require.Contains(t, c.Detail, "ticks never fired: ")
					}
				}
			}
		})
	}
}

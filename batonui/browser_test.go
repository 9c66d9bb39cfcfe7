package batonui

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
)

// chromium returns the browser to drive. Without one the test is skipped,
// except under CI=true, where it fails: CI installs chromium (.ci/run).
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("chromium not found (%v): CI must install it (.ci/run does: apt-get install chromium)", err)
	}
	t.Skipf("chromium not found (%v): skipping the real-browser test; apt-get install chromium to run it (under CI=true it fails instead)", err)
	return ""
}

// fields are job args of any kind.
type fields struct {
	kind string
	m    map[string]any
}

func (f fields) Kind() string                 { return f.kind }
func (f fields) MarshalJSON() ([]byte, error) { return json.Marshal(f.m) }

// syncArgs are the args of the keyed jobs the browser test runs.
type syncArgs struct {
	Account string `json:"account"`
}

func (syncArgs) Kind() string { return "sync_account" }

// syncKey is the concurrency key of the keyed jobs: a slash, a space and
// braces, which a URL path would mangle.
const syncKey = "account:{acme}/eu west"

// TestBrowser drives the dashboard in headless Chromium: it opens the
// overview, a queue, and a job whose args hold a script tag (shown as
// text, never run), pauses a queue with its form, and sees a change made
// elsewhere appear through the live update. Then it opens a queue's keys
// page and a halted key with parked jobs, raises the key's limit with its
// form, and watches the parked jobs run, chained behind the running ones,
// and the key drain, live. With
// BATON_SCREENSHOT=1 it saves the overview to docs/img/dashboard.png and
// the key page to docs/img/dashboard-key.png.
func TestBrowser(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	ctx := context.Background()
	d := batonmem.New()
	client, err := baton.NewClient(d, &baton.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	locker, err := batonlock.New(d, nil)
	require.NoError(t, err)
	every, err := baton.Every(15 * time.Minute)
	require.NoError(t, err)
	hourly, err := baton.Cron("@hourly")
	require.NoError(t, err)
	ui, err := New(client, &Config{
		NoAuth: true, Writable: true, BasePath: "/baton", RefreshInterval: time.Second,
		Locker: locker, LockKeys: []string{"sync:user:42"},
		PeriodicJobs: []*baton.PeriodicJob{
			{Name: "sync-all-users", Schedule: every, Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return fields{kind: "sync"}, nil }},
			{Name: "hourly-report", Schedule: hourly, Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return fields{kind: "report"}, nil }},
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	shot := os.Getenv("BATON_SCREENSHOT") == "1"
	evil := populate(t, client, d, shot)
	if shot {
		fakeHistory(ui.(*handler))
	}

	// A started client runs the keyed jobs of queue "sync", one key
	// halted: its jobs wait, parked, until the form raises the limit.
	// Each job blocks until release, so that the test sees them hold
	// their slots.
	release := make(chan struct{})
	var running, most atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[syncArgs](func(ctx context.Context, job *baton.Job[syncArgs]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		time.Sleep(50 * time.Millisecond)
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		Key:   baton.KeyOf(func(a syncArgs) string { return a.Account }),
		Limit: 1,
	}})
	runner, err := baton.NewClient(d, &baton.Config{
		Workers: workers, Queues: []baton.QueueConfig{{Name: "sync"}}, Concurrency: 10,
		Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	_, err = client.SetLimit(ctx, "sync", syncKey, 0)
	require.NoError(t, err)
	const syncJobs = 6
	for range syncJobs {
		res, err := runner.Insert(ctx, syncArgs{Account: syncKey}, &baton.InsertOpts{Queue: "sync"})
		require.NoError(t, err)
		require.Equal(t, baton.JobStateParked, res.Job.State)
	}
	require.NoError(t, runner.Start(ctx))
	var released bool
	t.Cleanup(func() {
		if !released {
			close(release)
		}
		require.NoError(t, runner.Stop(context.Background()))
	})

	mux := http.NewServeMux()
	mux.Handle("/baton/", ui)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	base := srv.URL + "/baton"

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	bctx, cancelTimeout := context.WithTimeout(bctx, 60*time.Second)
	defer cancelTimeout()

	// Any dialog is a script that ran: record it and dismiss it (from
	// another goroutine: a listener must not run commands) so that the
	// test goes on to fail cleanly.
	var dialogs atomic.Int32
	require.NoError(t, chromedp.Listen(bctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
			go func() {
				_, _ = chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		}
	}))
	css := func(s string) chromedp.CSS { return chromedp.CSS(s) }
	// text reads the text of sel, again while it reads empty: a live
	// update that replaces the node while it is read leaves "" (seen on a
	// loaded machine), and no element read here is empty.
	text := func(sel string) string {
		t.Helper()
		var s string
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var err error
			s, err = chromedp.Run(bctx, chromedp.Text(css(sel)))
			require.NoError(t, err, "text of %s", sel)
			if strings.TrimSpace(s) != "" || time.Now().After(deadline) {
				return s
			}
		}
	}
	location := func() string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Location())
		require.NoError(t, err)
		return s
	}

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(css(`table.queues`)),
	), "open the overview")
	require.Contains(t, text(`table.queues`), "emails")
	require.Contains(t, text(`table.queues`), "webhooks")

	if shot {
		require.NoError(t, chromedp.Do(bctx,
			chromedp.EmulateViewport(1280, 860),
			chromedp.Sleep(300*time.Millisecond), // let the layout settle after the resize
		))
		img, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		out := filepath.Join("..", "docs", "img", "dashboard.png")
		require.NoError(t, os.MkdirAll(filepath.Dir(out), 0o755))
		require.NoError(t, os.WriteFile(out, img, 0o644))
		t.Logf("wrote %s", out)
	}

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(css(`table.queues a[href="/baton/queues/emails"]`)),
		chromedp.WaitVisible(css(`nav.tabs`)),
	), "open a queue from the overview")
	require.True(t, strings.HasSuffix(location(), "/baton/queues/emails"), location())
	require.Contains(t, text(`main`), "Pause queue")

	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/queues/emails/jobs/"+evil),
		chromedp.WaitVisible(css(`#args`)),
	), "open the job with a script in its args")
	require.Contains(t, text(`#args`), `<script>alert(1)</script>`, "the args show as text")
	scripts, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("script").length`))
	require.NoError(t, err)
	require.Equal(t, 1, scripts, "the only script element is the dashboard's own")

	pause := `form[action="/baton/queues/emails/pause"] button`
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/queues/emails"),
		chromedp.WaitVisible(css(pause)),
		chromedp.Click(css(pause)),
		chromedp.WaitVisible(css(`.badge.paused`)),
	), "pause the queue with its form")
	require.Contains(t, text(`.flash`), "Queue paused")
	require.NotContains(t, location(), "done=", "the page drops the message code from its URL")
	st, err := client.QueueStats(ctx, "emails")
	require.NoError(t, err)
	require.True(t, st.Paused)

	// Resumed elsewhere: the open page shows it without a reload.
	require.NoError(t, client.QueueResume(ctx, "emails"))
	require.NoError(t, chromedp.Do(bctx, chromedp.WaitVisible(css(`.badge.active`))), "the live update shows the resumed queue")
	require.True(t, strings.HasSuffix(location(), "/baton/queues/emails"), location())

	// The keys: from the queue page's tab to the keys page, then the key.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Navigate(base+"/queues/sync"),
		chromedp.WaitVisible(css(`nav.tabs a.keys`)),
		chromedp.Click(css(`nav.tabs a.keys`)),
		chromedp.WaitVisible(css(`table.keys`)),
	), "open the queue's keys page")
	require.True(t, strings.HasSuffix(location(), "/baton/queues/sync/keys"), location())
	require.Contains(t, text(`table.keys`), syncKey)
	require.Contains(t, text(`table.keys`), "halted")
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(css(`table.keys td.keyname a`)),
		chromedp.WaitVisible(css(`#parked`)),
	), "open the halted key")
	require.Contains(t, location(), "/baton/queues/sync/keys?key=")
	require.Equal(t, syncKey, text(`#key`), "the key survives its URL")
	require.Equal(t, strconv.Itoa(syncJobs), text(`#parked`))
	require.Contains(t, text(`#limit`), "halted")

	// Raise the limit to 2 with the form. Typing keeps the input focused,
	// which holds off the live update while the value is entered.
	require.NoError(t, chromedp.Do(bctx,
		chromedp.Click(css(`#limit-input`)),
		chromedp.SendKeys(css(`#limit-input`), "2"),
		chromedp.Click(css(`#set-limit`)),
		chromedp.WaitVisible(css(`.flash`)),
	), "set the limit to 2")
	require.Contains(t, text(`.flash`), "Limit stored")
	require.Contains(t, location(), "/baton/queues/sync/keys?key=")
	info, err := client.KeyGet(ctx, "sync", syncKey)
	require.NoError(t, err)
	require.Equal(t, 2, info.Limit)
	require.True(t, info.Override)

	// Two jobs run, holding the slots. The client, with nothing else to
	// run, chains the next parked job behind each it leased (one fetch may
	// lease both, or two fetches one each: at least the last chains); the
	// rest stay parked. The page shows it through its live update, and
	// counts every job of the key.
	waitFor := func(what, js string) {
		t.Helper()
		_, err := chromedp.Run(bctx, chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
		require.NoError(t, err, "waiting until %s", what)
	}
	fact := func(id string) string {
		return `(document.getElementById("` + id + `") || {textContent: ""}).textContent.trim().split(" ")[0]`
	}
	waitFor("two jobs run, jobs chained behind them", fact("running")+` === "2" && `+fact("holding")+` === "2" && `+
		`Number(`+fact("chained")+`) >= 1 && Number(`+fact("chained")+`) + Number(`+fact("parked")+`) === `+strconv.Itoa(syncJobs-2))
	holders, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll("table.holders tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 2, holders, "two holders listed")
	require.Contains(t, text(`table.holders`), "running")
	chained, err := strconv.Atoi(strings.Fields(text(`#chained`))[0])
	require.NoError(t, err)
	nexts, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("table.holders a.next"), a => a.textContent)`))
	require.NoError(t, err)
	require.Len(t, nexts, chained, "each chained job linked from its holder's row")
	for _, id := range nexts {
		j, err := client.JobGet(ctx, "sync", id)
		require.NoError(t, err)
		require.Equal(t, baton.JobStateRunning, j.State, "chained job %s", id)
		require.NotEmpty(t, j.After, "chained job %s", id)
	}

	if shot {
		u, err := url.Parse(location())
		require.NoError(t, err)
		q := u.Query()
		q.Del("done")
		u.RawQuery = q.Encode()
		require.NoError(t, chromedp.Do(bctx,
			chromedp.Navigate(u.String()),
			chromedp.WaitVisible(css(`table.holders`)),
			chromedp.EmulateViewport(1280, 860),
			chromedp.Sleep(300*time.Millisecond),
		))
		img, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		out := filepath.Join("..", "docs", "img", "dashboard-key.png")
		require.NoError(t, os.WriteFile(out, img, 0o644))
		t.Logf("wrote %s", out)
	}

	// Let the jobs finish: the key drains, two at a time, and the open
	// page follows.
	released = true
	close(release)
	waitFor("the key drains", fact("parked")+` === "0" && `+fact("holding")+` === "0" && `+fact("chained")+` === "0"`)
	require.Contains(t, text(`main`), "No job of this key holds a slot.")
	st, err = client.QueueStats(ctx, "sync")
	require.NoError(t, err)
	require.Equal(t, syncJobs, st.Counts[baton.JobStateCompleted])
	require.Equal(t, int32(2), most.Load(), "never more than the limit at once")

	require.Zero(t, dialogs.Load(), "no script from job data ran")
}

// populate fills queues with jobs in every state and returns the ID of
// one whose args hold a script tag. many adds the thousands of completed
// jobs an hour of work would leave, for the screenshot.
func populate(t *testing.T, client *baton.Client, d *batonmem.Driver, many bool) string {
	t.Helper()
	ctx := context.Background()
	insert := func(queue, kind string, m map[string]any, o *baton.InsertOpts) *baton.JobRow {
		t.Helper()
		if o == nil {
			o = &baton.InsertOpts{}
		}
		o.Queue = queue
		res, err := client.Insert(ctx, fields{kind, m}, o)
		require.NoError(t, err)
		return res.Job
	}
	// finish takes n jobs of queue and gives each the outcome.
	finish := func(queue string, n int, outcome batondriver.JobOutcome, msg string) {
		t.Helper()
		res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: n, LeaseTTL: time.Minute})
		require.NoError(t, err)
		var fin []*batondriver.JobFinish
		for _, j := range res.Jobs {
			fin = append(fin, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: outcome, Error: msg})
		}
		_, err = d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Finished: fin, Retention: time.Hour})
		require.NoError(t, err)
	}
	bulk := func(queue, kind string, n int) {
		t.Helper()
		if !many {
			return
		}
		var ps []*baton.InsertManyParams
		for i := range n {
			ps = append(ps, &baton.InsertManyParams{Args: fields{kind, map[string]any{"n": i}}, Opts: &baton.InsertOpts{Queue: queue}})
		}
		_, err := client.InsertMany(ctx, ps)
		require.NoError(t, err)
		finish(queue, n, batondriver.JobOutcomeCompleted, "")
	}
	bulk("emails", "welcome_email", 1240)
	bulk("webhooks", "deliver_webhook", 2630)
	bulk("reports", "monthly_report", 410)
	for i := range 40 {
		insert("emails", "welcome_email", map[string]any{"user_id": 1000 + i, "template": "welcome"}, nil)
	}
	finish("emails", 25, batondriver.JobOutcomeCompleted, "")
	_, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "emails", Max: 3, LeaseTTL: time.Minute})
	require.NoError(t, err)
	evil := insert("emails", "welcome_email", map[string]any{"user_id": 7, "name": "<script>alert(1)</script>"}, nil)
	for i := range 6 {
		insert("emails", "digest_email", map[string]any{"user_id": 2000 + i}, &baton.InsertOpts{Delay: time.Duration(i+1) * 7 * time.Minute})
	}
	for i := range 30 {
		insert("webhooks", "deliver_webhook", map[string]any{"customer_id": i % 4, "event": "invoice.paid"}, &baton.InsertOpts{MaxAttempts: 1})
	}
	finish("webhooks", 18, batondriver.JobOutcomeCompleted, "")
	finish("webhooks", 3, batondriver.JobOutcomeDead, "POST https://hooks.example.com/baton: 503 Service Unavailable")
	_, err = d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "webhooks", Max: 5, LeaseTTL: time.Minute})
	require.NoError(t, err)
	// Keyed deliveries: a busy customer, a few quiet ones, and a halted
	// one, for the keys page.
	byCustomer := func(c string) *baton.InsertOpts {
		return &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{Key: func(baton.JobArgs) string { return "customer:" + c }, Limit: 2}}
	}
	_, err = client.SetLimit(ctx, "webhooks", "customer:umbrella", 0)
	require.NoError(t, err)
	for c, n := range map[string]int{"acme": 9, "globex": 3, "initech": 1, "umbrella": 4} {
		for range n {
			insert("webhooks", "deliver_webhook", map[string]any{"customer": c, "event": "invoice.paid"}, byCustomer(c))
		}
	}
	for i := range 12 {
		insert("reports", "monthly_report", map[string]any{"account": fmt.Sprintf("acct-%03d", i)}, nil)
	}
	finish("reports", 9, batondriver.JobOutcomeCompleted, "")
	finish("reports", 1, batondriver.JobOutcomeCancel, "account closed")
	require.NoError(t, client.QueuePause(ctx, "reports"))
	return evil.ID
}

// fakeHistory fills the throughput history with an hour of made-up
// samples that end at the queues' real counts, for the screenshot only:
// the test cannot wait an hour.
func fakeHistory(h *handler) {
	stats, _ := h.client.QueueStatsAll(context.Background())
	now := time.Now()
	h.now = func() time.Time { return now }
	const n = int(historyWindow / sampleEvery)
	for i := range n {
		if i > 30 && i < 60 {
			continue // nobody watched for five minutes
		}
		var ss []*baton.QueueStats
		for k, st := range stats {
			// The share of the hour's jobs done by sample i, along a wave.
			share := func(i int) float64 {
				return (float64(i) + 12*math.Sin(float64(i)/30+float64(k))) / float64(n)
			}
			done, failed := st.Counts[baton.JobStateCompleted], st.Counts[baton.JobStateDead]+st.Counts[baton.JobStateCancelled]
			ss = append(ss, &baton.QueueStats{Queue: st.Queue, Counts: map[baton.JobState]int{
				baton.JobStateCompleted: int(float64(done) * min(1, share(i)/share(n-1))),
				baton.JobStateDead:      failed * (i + 1) / n,
			}})
		}
		at := now.Add(-time.Duration(n-1-i) * sampleEvery)
		h.hist.due(at)
		h.hist.add(at, ss)
	}
}

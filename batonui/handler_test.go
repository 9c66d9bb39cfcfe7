package batonui_test

import (
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/batonui"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// rawArgs are job args of any kind and fields.
type rawArgs struct {
	kind   string
	fields map[string]any
}

func (a rawArgs) Kind() string                 { return a.kind }
func (a rawArgs) MarshalJSON() ([]byte, error) { return json.Marshal(a.fields) }

// env is a dashboard on a fresh in-memory backend, served by a test server.
type env struct {
	t      *testing.T
	driver *batonmem.Driver
	client *baton.Client
	locker *batonlock.Locker
	srv    *httptest.Server
	http   *http.Client
	base   string
}

// setup serves a dashboard with cfg (nil: NoAuth, read-only) completed
// with the env's locker and a quiet logger.
func setup(t *testing.T, cfg *batonui.Config) *env {
	t.Helper()
	t.Parallel()
	d := batonmem.New()
	client, err := baton.NewClient(d, &baton.Config{Logger: quiet})
	require.NoError(t, err)
	locker, err := batonlock.New(d, nil)
	require.NoError(t, err)
	if cfg == nil {
		cfg = &batonui.Config{NoAuth: true}
	}
	if cfg.Locker == nil {
		cfg.Locker = locker
	}
	cfg.Logger = quiet
	h, err := batonui.New(client, cfg)
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle(cfg.BasePath+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	hc := srv.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &env{t: t, driver: d, client: client, locker: locker, srv: srv, http: hc, base: cfg.BasePath}
}

// insert adds a job of kind with fields to queue.
func (e *env) insert(queue, kind string, fields map[string]any) *baton.JobRow {
	e.t.Helper()
	res, err := e.client.Insert(context.Background(), rawArgs{kind, fields}, &baton.InsertOpts{Queue: queue})
	require.NoError(e.t, err)
	return res.Job
}

// finish fetches the next job of queue and records outcome for it, with
// errMsg as its error.
func (e *env) finish(queue string, outcome batondriver.JobOutcome, errMsg string) *baton.JobRow {
	e.t.Helper()
	ctx := context.Background()
	res, err := e.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: 1, LeaseTTL: time.Minute})
	require.NoError(e.t, err)
	require.Len(e.t, res.Jobs, 1)
	j := res.Jobs[0]
	fin := &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: outcome, Error: errMsg}
	_, err = e.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Finished: []*batondriver.JobFinish{fin}, Retention: time.Hour})
	require.NoError(e.t, err)
	row, err := e.client.JobGet(ctx, queue, j.ID)
	require.NoError(e.t, err)
	return row
}

// do sends a request to path under the base and returns the status and
// body.
func (e *env) do(req *http.Request) (*http.Response, string) {
	e.t.Helper()
	resp, err := e.http.Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp, string(b)
}

func (e *env) request(method, path string, form url.Values) *http.Request {
	e.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, e.srv.URL+e.base+path, body)
	require.NoError(e.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	return req
}

// get fetches a page and requires status.
func (e *env) get(path string, status int) string {
	e.t.Helper()
	resp, body := e.do(e.request(http.MethodGet, path, nil))
	require.Equal(e.t, status, resp.StatusCode, "GET %s: %s", path, body)
	return body
}

// post submits a form as a browser on the dashboard's own page does.
func (e *env) post(path string, form url.Values) *http.Response {
	e.t.Helper()
	req := e.request(http.MethodPost, path, form)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Origin", e.srv.URL)
	resp, _ := e.do(req)
	return resp
}

func (e *env) paused(queue string) bool {
	e.t.Helper()
	st, err := e.client.QueueStats(context.Background(), queue)
	require.NoError(e.t, err)
	return st.Paused
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	client, err := baton.NewClient(batonmem.New(), nil)
	require.NoError(t, err)
	for name, cfg := range map[string]*batonui.Config{
		"nil":           nil,
		"no auth":       {},
		"both":          {NoAuth: true, Auth: batonui.BasicAuth("a", "b")},
		"base no slash": {NoAuth: true, BasePath: "admin"},
		"base trailing": {NoAuth: true, BasePath: "/admin/"},
		// New must not accept a base path under which nothing can be
		// served: the mux and StripPrefix see the decoded, cleaned path.
		"base escape":     {NoAuth: true, BasePath: "/admin%20baton"},
		"base dot":        {NoAuth: true, BasePath: "/admin/./baton"},
		"base dot-dot":    {NoAuth: true, BasePath: "/admin/.."},
		"base dot at end": {NoAuth: true, BasePath: "/admin/."},
		"base control":    {NoAuth: true, BasePath: "/admin\tbaton"},
		"page size":       {NoAuth: true, PageSize: 5000},
		"refresh":         {NoAuth: true, RefreshInterval: time.Millisecond},
		"lock keys":       {NoAuth: true, LockKeys: []string{"k"}},
		"origin":          {NoAuth: true, TrustedOrigins: []string{"not an origin"}},
		"schedule":        {NoAuth: true, PeriodicJobs: []*baton.PeriodicJob{{Name: "x"}}},
	} {
		_, err := batonui.New(client, cfg)
		require.Error(t, err, name)
	}
	_, err = batonui.New(nil, &batonui.Config{NoAuth: true})
	require.Error(t, err)
	for _, base := range []string{"/admin/baton", "/admin/baton.v2", "/caf\u00e9", "/a;b"} {
		_, err = batonui.New(client, &batonui.Config{NoAuth: true, BasePath: base})
		require.NoError(t, err, base)
	}
}

func TestAuthRequired(t *testing.T) {
	e := setup(t, &batonui.Config{Auth: batonui.BasicAuth("admin", "s3cret"), Writable: true})
	e.insert("default", "email", nil)
	for _, path := range []string{"/", "/queues/default", "/static/style.css", "/dead", "/queues/default/keys"} {
		resp, _ := e.do(e.request(http.MethodGet, path, nil))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")

		req := e.request(http.MethodGet, path, nil)
		req.SetBasicAuth("admin", "wrong")
		resp, _ = e.do(req)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)

		req = e.request(http.MethodGet, path, nil)
		req.SetBasicAuth("admin", "s3cret")
		resp, _ = e.do(req)
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
	}
	// An action without credentials changes nothing.
	resp := e.post("/queues/default/pause", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.False(t, e.paused("default"))

	req := e.request(http.MethodPost, "/queues/default/pause", url.Values{})
	req.SetBasicAuth("admin", "s3cret")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	resp, _ = e.do(req)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, e.paused("default"))
}

func TestBasicAuthEmptyPasswordLetsNobodyIn(t *testing.T) {
	e := setup(t, &batonui.Config{Auth: batonui.BasicAuth("admin", "")})
	req := e.request(http.MethodGet, "/", nil)
	req.SetBasicAuth("admin", "")
	resp, _ := e.do(req)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

func TestCSRFRejectsCrossOriginPosts(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true, TrustedOrigins: []string{"https://ops.example.com"}})
	e.insert("default", "email", nil)

	for name, hdr := range map[string]map[string]string{
		"cross-site":        {"Sec-Fetch-Site": "cross-site"},
		"same-site":         {"Sec-Fetch-Site": "same-site", "Origin": "https://other.example.com"},
		"foreign origin":    {"Origin": "https://evil.example"},
		"untrusted and sfs": {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
	} {
		req := e.request(http.MethodPost, "/queues/default/pause", url.Values{})
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, body := e.do(req)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, name)
		require.Contains(t, body, "Cross-origin request refused", name)
		require.False(t, e.paused("default"), name)
	}

	req := e.request(http.MethodPost, "/queues/default/pause", url.Values{})
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://ops.example.com")
	resp, _ := e.do(req)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a trusted origin may post")
	require.True(t, e.paused("default"))

	// A GET never changes anything: the action routes are POST only.
	req = e.request(http.MethodGet, "/queues/default/resume", nil)
	resp, _ = e.do(req)
	require.NotEqual(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, e.paused("default"))
}

func TestReadOnlyRefusesPost(t *testing.T) {
	e := setup(t, nil) // read-only by default
	j := e.insert("default", "email", nil)
	for _, path := range []string{"/queues/default/pause", "/queues/default/jobs/" + j.ID + "/delete", "/queues/default/jobs/" + j.ID + "/retry",
		"/queues/default/jobs/" + j.ID + "/cancel"} {
		resp := e.post(path, url.Values{})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
	}
	require.False(t, e.paused("default"))
	_, err := e.client.JobGet(context.Background(), "default", j.ID)
	require.NoError(t, err, "the job is still there")

	for _, path := range []string{"/", "/queues/default", "/queues/default/jobs/" + j.ID} {
		body := e.get(path, http.StatusOK)
		require.NotContains(t, body, `method="post"`, path)
		require.Contains(t, body, "read-only", path)
	}
}

func TestEscapesJobData(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true})
	const evil = "<script>alert(1)</script>"
	j := e.insert("default", `<img src=x onerror=alert(2)>`, map[string]any{"note": evil})
	_, err := e.client.Insert(context.Background(), rawArgs{"x", map[string]any{"note": evil}}, &baton.InsertOpts{Queue: "dead", Tags: []string{"<b>tag</b>"}})
	require.NoError(t, err)
	dead := e.finish("dead", batondriver.JobOutcomeDead, evil)
	// A completed job whose output holds markup (baton.RecordOutput).
	ctx := context.Background()
	e.insert("done", "x", nil)
	fetched, err := e.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "done", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 1)
	out := fetched.Jobs[0]
	_, err = e.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: "done", Retention: time.Hour, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: out.ID, Lease: out.Lease}, Outcome: batondriver.JobOutcomeCompleted, Output: []byte(`{"note":"` + evil + `"}`)},
	}})
	require.NoError(t, err)

	pages := []string{
		"/",
		"/queues/default",
		"/queues/default/jobs/" + j.ID,
		"/queues/dead?state=dead",
		"/queues/dead/jobs/" + dead.ID,
		"/queues/done/jobs/" + out.ID,
		"/dead",
		"/locks?key=" + url.QueryEscape(evil),
	}
	for _, path := range pages {
		body := e.get(path, http.StatusOK)
		require.NotContains(t, body, "<script>alert", path)
		require.NotContains(t, body, "<img src=x", path)
		require.NotContains(t, body, "<b>tag", path)
	}
	body := e.get("/queues/default/jobs/"+j.ID, http.StatusOK)
	// The text shows as it is, escaped.
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	require.Contains(t, body, "&lt;img src=x onerror=alert(2)&gt;")
	body = e.get("/queues/dead/jobs/"+dead.ID, http.StatusOK)
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;", "the error is escaped")
	require.Contains(t, body, "&lt;b&gt;tag&lt;/b&gt;")
	body = e.get("/locks?key="+url.QueryEscape(evil), http.StatusOK)
	require.Contains(t, body, "&lt;script&gt;alert(1)&lt;/script&gt;")
	body = e.get("/queues/done/jobs/"+out.ID, http.StatusOK)
	require.Contains(t, body, `<h2>Output</h2>`)
	require.Regexp(t, `id="output">\{\s+&#34;note&#34;: &#34;&lt;script&gt;alert\(1\)&lt;/script&gt;&#34;\s+\}</pre>`, body, "the output, indented and escaped")
	require.NotContains(t, e.get("/queues/default/jobs/"+j.ID, http.StatusOK), "<h2>Output</h2>", "no output recorded")
}

// TestEscapesRawArgs covers args that are not JSON-escaped: a job inserted
// by another client straight through the backend.
func TestEscapesRawArgs(t *testing.T) {
	e := setup(t, nil)
	res, err := e.driver.JobInsert(context.Background(), &batondriver.JobInsertParams{Queue: "raw", Jobs: []*batondriver.JobInsert{
		{Kind: "raw", Args: []byte(`{"note":"</pre><script>alert(1)</script>"}`), MaxAttempts: 1},
	}})
	require.NoError(t, err)
	body := e.get("/queues/raw/jobs/"+res.Jobs[0].ID, http.StatusOK)
	require.NotContains(t, body, "<script>alert")
	require.Contains(t, body, "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;")
}

func TestPagesRender(t *testing.T) {
	every, err := baton.Every(15 * time.Minute)
	require.NoError(t, err)
	e := setup(t, &batonui.Config{
		NoAuth: true, Writable: true, BasePath: "/admin/baton", LockKeys: []string{"sync:user:1"},
		PeriodicJobs: []*baton.PeriodicJob{{Name: "fan-out", Schedule: every, Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return rawArgs{kind: "x"}, nil }}},
	})
	ctx := context.Background()
	avail := e.insert("emails", "email", map[string]any{"to": "a@example.com"})
	e.insert("emails", "email", map[string]any{"to": "b@example.com"})
	_, err = e.client.Insert(ctx, rawArgs{"email", nil}, &baton.InsertOpts{Queue: "emails", Delay: time.Hour})
	require.NoError(t, err)
	e.insert("reports", "report", nil)
	dead := e.finish("reports", batondriver.JobOutcomeDead, "boom")
	lease, err := e.locker.TryAcquire(ctx, "sync:user:1", &batonlock.AcquireOpts{NoHeartbeat: true, TTL: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lease.Release(context.Background()) })

	for path, want := range map[string][]string{
		"/":                                 {"Overview", `href="/admin/baton/queues/emails"`, "reports", "Throughput, last hour", "Pause queue"},
		"/queues/emails":                    {"emails", "a@example.com", "Available since", "Pause queue"},
		"/queues/emails?state=scheduled":    {"Due", "Run now"},
		"/queues/emails?state=completed":    {"No completed jobs."},
		"/queues/emails/jobs/" + avail.ID:   {avail.ID, "a@example.com", "inserted", "No failed attempts."},
		"/queues/reports/jobs/" + dead.ID:   {"attempt 1 failed", "boom", "Retry", "Delete"},
		"/dead":                             {"Dead jobs", "reports", dead.ID, "Retry"},
		"/dead?queue=reports&state=dead":    {dead.ID},
		"/locks":                            {"sync:user:1", "Last fence"},
		"/locks?key=sync:user:1":            {"Lease ends"},
		"/schedules":                        {"fan-out", "Next ticks"},
		"/static/style.css":                 {"--accent"},
		"/static/live.js":                   {"data-refresh"},
		"/queues/never-used":                {"No available jobs."},
		"/queues/emails/keys":               {"No active keys", `keys <span class="count">0</span>`},
		"/queues/emails?state=parked":       {"No parked jobs."},
		"/queues/emails?state=dropped":      {"No dropped jobs."},
		"/queues/emails?state=running&page": {"No running jobs."},
	} {
		body := e.get(path, http.StatusOK)
		for _, w := range want {
			require.Contains(t, body, w, path)
		}
	}
	e.get("/queues/emails/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", http.StatusNotFound)
	e.get("/queues/emails?state=bogus", http.StatusBadRequest)
	e.get("/queues/emails?page=0", http.StatusBadRequest)
	e.get("/dead?state=completed", http.StatusBadRequest)
	e.get("/nope", http.StatusNotFound)

	resp, body := e.do(e.request(http.MethodGet, "/", nil))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "script-src 'self'")
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
	require.Contains(t, body, `<noscript><meta http-equiv="refresh" content="5"></noscript>`)
}

func TestLocksWithoutLocker(t *testing.T) {
	t.Parallel()
	client, err := baton.NewClient(batonmem.New(), nil)
	require.NoError(t, err)
	h, err := batonui.New(client, &batonui.Config{NoAuth: true})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/locks", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "No locker is configured")
}

func TestActions(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true})
	ctx := context.Background()
	e.insert("q", "k", nil)
	dead := e.finish("q", batondriver.JobOutcomeDead, "boom")

	resp := e.post("/queues/q/jobs/"+dead.ID+"/retry", url.Values{"return": {"/dead?queue=q"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/dead?done=retried&queue=q", resp.Header.Get("Location"))
	row, err := e.client.JobGet(ctx, "q", dead.ID)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateAvailable, row.State)
	require.Contains(t, e.get("/dead?done=retried&queue=q", http.StatusOK), "Job retried")

	// Retrying a job that cannot be retried is refused, not a crash.
	e.insert("done", "k", nil)
	completed := e.finish("done", batondriver.JobOutcomeCompleted, "")
	resp = e.post("/queues/done/jobs/"+completed.ID+"/retry", url.Values{})
	require.Equal(t, http.StatusConflict, resp.StatusCode)

	resp = e.post("/queues/q/jobs/"+dead.ID+"/delete", url.Values{"return": {"https://evil.example/"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queues/q?done=deleted", resp.Header.Get("Location"), "no open redirect")
	_, err = e.client.JobGet(ctx, "q", dead.ID)
	require.ErrorIs(t, err, baton.ErrJobNotFound)
	resp = e.post("/queues/q/jobs/"+dead.ID+"/delete", url.Values{})
	require.Equal(t, http.StatusNotFound, resp.StatusCode)

	for _, ret := range []string{"//evil.example/", "/\\evil.example", "javascript:alert(1)"} {
		resp = e.post("/queues/q/pause", url.Values{"return": {ret}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/queues/q?done=paused", resp.Header.Get("Location"), ret)
	}
	require.True(t, e.paused("q"))
	require.Contains(t, e.get("/queues/q", http.StatusOK), "Resume queue")
	resp = e.post("/queues/q/resume", url.Values{"return": {"/"}})
	require.Equal(t, "/?done=resumed", resp.Header.Get("Location"))
	require.False(t, e.paused("q"))

	// Cancel: a queued job ends at once; a running one is asked to stop,
	// its page showing the request and no second Cancel; a completed one
	// is refused.
	queued := e.insert("c", "k", nil)
	require.Contains(t, e.get("/queues/c/jobs/"+queued.ID, http.StatusOK), "/cancel")
	resp = e.post("/queues/c/jobs/"+queued.ID+"/cancel", url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queues/c/jobs/"+queued.ID+"?done=cancelled", resp.Header.Get("Location"))
	row, err = e.client.JobGet(ctx, "c", queued.ID)
	require.NoError(t, err)
	require.Equal(t, baton.JobStateCancelled, row.State)
	e.insert("c", "k", nil)
	fetched, err := e.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "c", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	running := fetched.Jobs[0]
	resp = e.post("/queues/c/jobs/"+running.ID+"/cancel", url.Values{})
	require.Equal(t, "/queues/c/jobs/"+running.ID+"?done=stopping", resp.Header.Get("Location"))
	page := e.get("/queues/c/jobs/"+running.ID+"?done=stopping", http.StatusOK)
	require.Contains(t, page, "Job asked to stop")
	require.Contains(t, page, `id="cancel-requested"`)
	require.NotContains(t, page, running.ID+`/cancel"`, "no second Cancel")
	resp = e.post("/queues/done/jobs/"+completed.ID+"/cancel", url.Values{})
	require.Equal(t, http.StatusConflict, resp.StatusCode)
}

func TestPagination(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, PageSize: 2})
	var ids []string
	for range 5 {
		ids = append(ids, e.insert("q", "k", nil).ID)
	}
	body := e.get("/queues/q?state=available&page=2", http.StatusOK)
	require.Contains(t, body, ids[2])
	require.Contains(t, body, ids[3])
	require.NotContains(t, body, ids[1])
	require.NotContains(t, body, ids[4])
	require.Contains(t, body, "3–4 of 5")
	require.Contains(t, body, `href="/queues/q?page=1&amp;state=available"`)
	require.Contains(t, body, `href="/queues/q?page=3&amp;state=available"`)
	body = e.get("/queues/q?state=available&page=3", http.StatusOK)
	require.Contains(t, body, ids[4])
	require.NotContains(t, body, "Next →")
}

// TestRootDoesNotImportUI checks that a program importing only package
// baton compiles neither the dashboard nor its test-only browser driver.
func TestRootDoesNotImportUI(t *testing.T) {
	t.Parallel()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "github.com/batonhq/baton").CombinedOutput()
	require.NoError(t, err, string(out))
	for _, bad := range []string{"github.com/batonhq/baton/batonui", "github.com/chromedp/", "html/template"} {
		require.NotContains(t, string(out), bad)
	}
}

// TestBadQueueNameIsBadRequest checks that a queue name baton refuses, in
// a URL typed or edited by hand, is answered 400 with the rule, on pages and
// actions alike: not 502 as if the backend had failed.
func TestBadQueueNameIsBadRequest(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true})
	for _, p := range []string{"/queues/a%20b", "/queues/x%21", "/queues/a%20b/keys", "/queues/a%20b/keys?key=k", "/queues/a%20b/jobs/x", "/dead?queue=a%20b", "/queues/" + strings.Repeat("q", 129)} {
		body := e.get(p, http.StatusBadRequest)
		require.Contains(t, body, "A-Z a-z 0-9 _ . : -", p)
	}
	for _, p := range []string{"/queues/a%20b/pause", "/queues/a%20b/resume", "/queues/a%20b/jobs/x/retry", "/queues/a%20b/jobs/x/delete", "/queues/a%20b/keys/limit?key=k", "/queues/a%20b/keys/reset?key=k"} {
		resp := e.post(p, url.Values{"limit": {"3"}})
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, p)
	}
	// The dashboard's rule is baton's: every name it lets through, the
	// client takes, and the other way round.
	for _, q := range []string{"q", "a.b:c-d_E9", "a b", "x!", "a/b", "é", strings.Repeat("q", 128), strings.Repeat("q", 129)} {
		_, err := e.client.QueueStats(context.Background(), q)
		status := http.StatusOK
		if err != nil {
			status = http.StatusBadRequest
		}
		e.get("/dead?queue="+url.QueryEscape(q), status)
	}
}

// TestOverviewPauseReturnsToOverview checks that pausing or resuming a
// queue from the overview comes back to the overview, with or without a
// base path: the form's return field must be a URL the action accepts.
func TestOverviewPauseReturnsToOverview(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"", "/admin/baton"} {
		t.Run("base="+base, func(t *testing.T) {
			e := setup(t, &batonui.Config{NoAuth: true, Writable: true, BasePath: base})
			e.insert("q", "k", nil)
			for _, action := range []string{"pause", "resume"} {
				body := e.get("/", http.StatusOK)
				m := regexp.MustCompile(`action="` + regexp.QuoteMeta(base) + `/queues/q/` + action + `"[^>]*><input type="hidden" name="return" value="([^"]*)"`).FindStringSubmatch(body)
				require.NotNil(t, m, "the overview has a %s form for q", action)
				resp := e.post("/queues/q/"+action, url.Values{"return": {html.UnescapeString(m[1])}})
				require.Equal(t, http.StatusSeeOther, resp.StatusCode)
				require.Equal(t, base+"/?done="+action+"d", resp.Header.Get("Location"))
			}
		})
	}
}

// TestReturnStaysUnderBase checks that an action's return URL cannot leave
// the dashboard's base path with dot segments, which http.Redirect and
// browsers resolve ("%2e%2e" too).
func TestReturnStaysUnderBase(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true, BasePath: "/admin/baton"})
	for ret, want := range map[string]string{
		"/admin/baton/../../logout":             "/admin/baton/queues/q?done=paused",
		"/admin/baton/%2e%2e/logout":            "/admin/baton/queues/q?done=paused",
		"/admin/baton/%2E%2E/%2e%2e/logout?a=b": "/admin/baton/queues/q?done=paused",
		"/admin/baton/..":                       "/admin/baton/queues/q?done=paused",
		"/admin/baton/queues/../dead?queue=q":   "/admin/baton/dead?done=paused&queue=q",
		"/admin/baton/":                         "/admin/baton/?done=paused",
	} {
		resp := e.post("/queues/q/pause", url.Values{"return": {ret}})
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, ret)
		require.Equal(t, want, resp.Header.Get("Location"), ret)
	}
}

// TestTimelineDatetimes checks that the machine-readable times of a job's
// timeline are valid HTML datetimes (RFC 3339, in UTC), not the text shown.
func TestTimelineDatetimes(t *testing.T) {
	e := setup(t, nil)
	e.insert("q", "k", nil)
	j := e.finish("q", batondriver.JobOutcomeDead, "boom")
	body := e.get("/queues/q/jobs/"+j.ID, http.StatusOK)
	ms := regexp.MustCompile(`<time datetime="([^"]*)">`).FindAllStringSubmatch(body, -1)
	require.NotEmpty(t, ms)
	for _, m := range ms {
		at, err := time.Parse(time.RFC3339Nano, m[1])
		require.NoError(t, err, m[1])
		require.True(t, strings.HasSuffix(m[1], "Z"), m[1])
		require.WithinDuration(t, j.CreatedAt, at, time.Minute)
	}
}

// TestDeadQueueTabOpensOnItsJobs checks that a queue's tab on the dead page
// (a link without ?state=) opens on the state that has its jobs: a queue
// with only cancelled jobs shows them, as the first queue does when none is
// chosen, not "No dead jobs." beside a count of three.
func TestDeadQueueTabOpensOnItsJobs(t *testing.T) {
	e := setup(t, nil)
	e.insert("a", "k", nil)
	dead := e.finish("a", batondriver.JobOutcomeDead, "boom")
	e.insert("b", "k", nil)
	cancelled := e.finish("b", batondriver.JobOutcomeCancel, "account closed")
	e.insert("c", "k", nil)
	cancelledToo := e.finish("c", batondriver.JobOutcomeCancel, "account closed")

	body := e.get("/dead", http.StatusOK)
	require.Contains(t, body, dead.ID, "the first queue, on its dead jobs")
	require.Contains(t, body, `href="/dead?queue=b"`)
	body = e.get("/dead?queue=b", http.StatusOK)
	require.Contains(t, body, cancelled.ID)
	require.NotContains(t, body, "No dead jobs.")
	body = e.get("/dead?queue=b&state=dead", http.StatusOK)
	require.Contains(t, body, "No dead jobs.", "a state asked for is kept")
	body = e.get("/dead?queue=a", http.StatusOK)
	require.Contains(t, body, dead.ID)
	require.NotContains(t, e.get("/dead?queue=c", http.StatusOK), "No dead jobs.")
	require.Contains(t, e.get("/dead?queue=c", http.StatusOK), cancelledToo.ID)
}

// TestRefreshIntervalNotShortened checks that a RefreshInterval that is not
// whole seconds is not cut down: pages must not refresh more often than
// configured (1.5s became 1s, and 1.9s too).
func TestRefreshIntervalNotShortened(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, RefreshInterval: 1900 * time.Millisecond})
	body := e.get("/", http.StatusOK)
	require.Contains(t, body, `<body data-refresh="2">`)
	require.Contains(t, body, `<meta http-equiv="refresh" content="2">`)
}

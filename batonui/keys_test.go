package batonui_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonui"
)

// evilKey holds what a key may hold and a page must escape: markup, a
// slash, spaces, braces (a Redis hash tag), a dot segment and a non-UTF-8
// byte.
const evilKey = "<script>alert(1)</script>/{a b}/../x\xff"

// insertKeyed adds a job of queue with concurrency key and default limit.
func (e *env) insertKeyed(queue, key string, limit int, onBusy baton.OnBusy) *baton.JobRow {
	e.t.Helper()
	res, err := e.client.Insert(context.Background(), rawArgs{"sync", map[string]any{"key": key}}, &baton.InsertOpts{
		Queue:       queue,
		Concurrency: &baton.ConcurrencyOpts{Key: func(baton.JobArgs) string { return key }, Limit: limit, OnBusy: onBusy},
	})
	require.NoError(e.t, err)
	return res.Job
}

func (e *env) keyInfo(queue, key string) *baton.KeyInfo {
	e.t.Helper()
	info, err := e.client.KeyGet(context.Background(), queue, key)
	require.NoError(e.t, err)
	return info
}

// keyPath is the path of a key's page (or, with action, of its form's
// target) under the base.
func keyPath(queue, key, action string) string {
	p := "/queues/" + queue + "/keys"
	if action != "" {
		p += "/" + action
	}
	return p + "?key=" + strings.ReplaceAll(url.QueryEscape(key), "+", "%20")
}

func TestKeysPages(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true})
	ctx := context.Background()
	_, err := e.client.SetLimit(ctx, "q", evilKey, 0)
	require.NoError(t, err)
	parked := e.insertKeyed("q", evilKey, 1, "")
	parked2 := e.insertKeyed("q", evilKey, 1, "")
	parked3 := e.insertKeyed("q", evilKey, 1, "")
	holder := e.insertKeyed("q", "customer:42", 2, "")
	e.insertKeyed("q", "customer:7", 1, baton.OnBusyDrop)
	dropped := e.insertKeyed("q", "customer:7", 1, baton.OnBusyDrop) // its twin holds the slot
	require.Equal(t, baton.JobStateDropped, dropped.State)
	require.Equal(t, baton.JobStateParked, parked.State)

	evilHref := `href="` + keyPath("q", evilKey, "") + `"`
	list := e.get("/queues/q/keys", http.StatusOK)
	require.NotContains(t, list, "<script>alert")
	require.Contains(t, list, "&lt;script&gt;alert(1)&lt;/script&gt;/{a b}/../x")
	require.Contains(t, list, evilHref, "the key's link carries it in the query, escaped byte by byte")
	require.Contains(t, list, `href="`+keyPath("q", "customer:42", "")+`"`)
	require.Contains(t, list, "halted")
	require.Contains(t, list, `aria-current="page" title="Concurrency keys`, "the keys tab is current")
	require.Less(t, strings.Index(list, "&lt;script&gt;"), strings.Index(list, "keys?key=customer%3A42"), "most parked first")

	byWait := e.get("/queues/q/keys?sort=wait", http.StatusOK)
	require.Contains(t, byWait, "Sorted by oldest wait within this page only")
	e.get("/queues/q/keys?sort=name", http.StatusBadRequest)
	require.Contains(t, e.get("/queues/empty/keys", http.StatusOK), "No active keys")

	page := e.get(keyPath("q", evilKey, ""), http.StatusOK)
	require.NotContains(t, page, "<script>alert")
	require.Contains(t, page, `<span class="mono" id="key">&lt;script&gt;alert(1)&lt;/script&gt;/{a b}/../x`)
	require.Contains(t, page, `<dd id="parked">3</dd>`)
	require.Contains(t, page, "halted")
	require.Contains(t, page, `action="`+keyPath("q", evilKey, "limit")+`"`)
	require.Contains(t, page, `action="`+keyPath("q", evilKey, "reset")+`"`)
	require.Contains(t, page, "No job of this key holds a slot.")
	require.Contains(t, page, "Parked, next to run first")
	at := func(page string, row *baton.JobRow) int {
		t.Helper()
		i := strings.Index(page, `href="/queues/q/jobs/`+row.ID+`"`)
		require.Positive(t, i, "job %s not listed", row.ID)
		return i
	}
	require.Less(t, at(page, parked), at(page, parked2), "parked jobs in the order they will run")
	require.Less(t, at(page, parked2), at(page, parked3), "parked jobs in the order they will run")
	require.Contains(t, page, "1–3 of 3")

	page = e.get(keyPath("q", "customer:42", ""), http.StatusOK)
	require.Contains(t, page, `href="/queues/q/jobs/`+holder.ID+`"`, "a holder links to its job")
	require.Contains(t, page, `<dd id="holding">1`)
	require.NotContains(t, page, "/reset?", "no reset without a stored limit")
	require.Contains(t, page, "No parked jobs.")

	e.get(keyPath("q", "never-used", ""), http.StatusNotFound)
	e.get(keyPath("q", strings.Repeat("k", 513), ""), http.StatusBadRequest)

	// A key typed into the path is taken to its page.
	resp, _ := e.do(e.request(http.MethodGet, "/queues/q/keys/"+url.PathEscape("a/b {c}"), nil))
	require.Equal(t, http.StatusFound, resp.StatusCode)
	require.Equal(t, keyPath("q", "a/b {c}", ""), resp.Header.Get("Location"))
	resp, _ = e.do(e.request(http.MethodGet, "/queues/q/keys/customer:42/eu", nil))
	require.Equal(t, keyPath("q", "customer:42/eu", ""), resp.Header.Get("Location"))

	// The queue page counts the new states and the keys.
	queue := e.get("/queues/q?state=parked", http.StatusOK)
	require.Contains(t, queue, `parked <span class="count">3</span>`)
	require.Contains(t, queue, `dropped <span class="count">1</span>`)
	require.Contains(t, queue, `keys <span class="count">3</span>`)
	require.Contains(t, queue, "Parked since")
	require.Contains(t, queue, parked.ID)
	require.Contains(t, queue, "1 job dropped by a busy key since the queue began")
	require.Contains(t, e.get("/queues/q?state=dropped", http.StatusOK), dropped.ID)
	overview := e.get("/", http.StatusOK)
	require.Contains(t, overview, `<a href="/queues/q/keys">3</a>`)
	require.Contains(t, overview, `href="/queues/q?state=parked"`)

	// A job page names its key, linked, and its concurrency settings.
	job := e.get("/queues/q/jobs/"+parked.ID, http.StatusOK)
	require.NotContains(t, job, "<script>alert")
	require.Contains(t, job, evilHref)
	require.Contains(t, job, "Parked at")
	require.Contains(t, job, "<dt>On busy</dt><dd>wait</dd>")
	// A run that asked for another: its fence and runs show.
	res, err := e.client.Insert(ctx, rawArgs{"sync", map[string]any{"n": 1}}, &baton.InsertOpts{
		Queue:       "again",
		Concurrency: &baton.ConcurrencyOpts{Key: func(baton.JobArgs) string { return "user:1" }},
		Unique:      &baton.UniqueOpts{Scope: baton.UniqueUntilDone},
	})
	require.NoError(t, err)
	fetched, err := e.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "again", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 1)
	fj := fetched.Jobs[0]
	_, err = e.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: "again", Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: fj.ID, Lease: fj.Lease}, Outcome: batondriver.JobOutcomeAgain, RunAt: time.Now()},
	}})
	require.NoError(t, err)
	job = e.get("/queues/again/jobs/"+res.Job.ID, http.StatusOK)
	require.Contains(t, job, `<dt>Fence</dt><dd class="mono">`+strconv.FormatInt(fj.Fence, 10))
	require.Contains(t, job, "<dt>Runs</dt><dd>1 ")
	require.Contains(t, job, "<dt>Unique</dt>")
	require.Contains(t, job, "scope until_done")
	require.Contains(t, job, `href="`+keyPath("again", "user:1", "")+`"`)

	job = e.get("/queues/q/jobs/"+dropped.ID, http.StatusOK)
	require.Contains(t, job, "<dt>On busy</dt><dd>drop</dd>")
	require.Contains(t, job, "busy", "the drop's reason is on the timeline")
	require.NotContains(t, job, "attempt 0 failed")
}

// TestKeyChained shows a job chained behind a key's holder: counted on the
// keys page and the key page, linked from its holder's row, and linking
// back from its own page.
func TestKeyChained(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	const key = "customer:9"
	var jobs []*baton.JobRow
	for range 3 {
		jobs = append(jobs, e.insertKeyed("q", key, 1, ""))
	}
	fetched, err := e.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "q", Max: 1, LeaseTTL: time.Minute, Chain: true})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 2, "the holder and the job chained behind it")
	holder, chained := fetched.Jobs[0], fetched.Jobs[1]
	require.Equal(t, holder.ID, chained.After)

	list := e.get("/queues/q/keys", http.StatusOK)
	require.Contains(t, list, `title="Jobs chained behind a running holder`)
	require.Regexp(t, `(\s*<td class="num">1</td>){5}\s*<td><span title="parked at`, list,
		"limit, holding, running, chained and parked: 1 each")

	page := e.get(keyPath("q", key, ""), http.StatusOK)
	require.Contains(t, page, `<dd id="holding">1 `)
	require.Contains(t, page, `<dd id="chained">1 `)
	require.Contains(t, page, `<dd id="parked">1</dd>`)
	require.Contains(t, page, `<a class="next" href="/queues/q/jobs/`+chained.ID+`">`+chained.ID+`</a>`, "the holder's row links to the job chained behind it")

	job := e.get("/queues/q/jobs/"+chained.ID, http.StatusOK)
	require.Contains(t, job, `<dt>Chained behind</dt><dd><a class="mono" id="after" href="/queues/q/jobs/`+holder.ID+`">`)
	require.NotContains(t, e.get("/queues/q/jobs/"+jobs[2].ID, http.StatusOK), "Chained behind", "a parked job")
}

func TestKeyLimitForm(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true})
	ctx := context.Background()
	const key = "tenant/{acme corp}"
	_, err := e.client.SetLimit(ctx, "q", key, 0)
	require.NoError(t, err)
	for range 3 {
		e.insertKeyed("q", key, 1, "")
	}

	// From another origin: refused, nothing changes.
	req := e.request(http.MethodPost, keyPath("q", key, "limit"), url.Values{"limit": {"2"}})
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.example")
	resp, body := e.do(req)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, body, "Cross-origin request refused")
	require.Zero(t, e.keyInfo("q", key).Limit)

	tooBig := strconv.Itoa(baton.MaxKeyLimit + 1)
	for _, bad := range []string{"", "two", "-1", "1.5", "1e3", tooBig, "99999999999999999999"} {
		req := e.request(http.MethodPost, keyPath("q", key, "limit"), url.Values{"limit": {bad}})
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, body := e.do(req)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		require.Contains(t, body, fmt.Sprintf("is not a whole number from 0 to %d", baton.MaxKeyLimit), bad)
		require.Contains(t, body, "0 halts the key", bad)
	}
	require.Zero(t, e.keyInfo("q", key).Limit)
	resp = e.post("/queues/q/keys/limit", url.Values{"limit": {"2"}})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "no key")

	resp = e.post(keyPath("q", key, "limit"), url.Values{"limit": {" 2 "}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/queues/q/keys?done=limit&key="+url.QueryEscape(key), resp.Header.Get("Location"))
	info := e.keyInfo("q", key)
	require.Equal(t, 2, info.Limit)
	require.True(t, info.Override)
	require.Equal(t, 2, info.Holding, "raising the limit promotes at once")
	require.Equal(t, 1, info.Parked)
	require.Contains(t, e.get(resp.Header.Get("Location"), http.StatusOK), "Limit stored")

	resp = e.post(keyPath("q", key, "limit"), url.Values{"limit": {"0"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "done=halted")
	info = e.keyInfo("q", key)
	require.Zero(t, info.Limit)
	require.Zero(t, info.Holding, "a halt sends jobs not started back to wait")
	require.Equal(t, 3, info.Parked)

	resp = e.post(keyPath("q", key, "reset"), url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "done=reset")
	info = e.keyInfo("q", key)
	require.False(t, info.Override)
	require.Equal(t, 1, info.Limit, "the jobs' default")
	require.Equal(t, 1, info.Holding)

	// The largest limit the library's tools take is taken here too.
	resp = e.post(keyPath("q", key, "limit"), url.Values{"limit": {strconv.Itoa(baton.MaxKeyLimit)}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, baton.MaxKeyLimit, e.keyInfo("q", key).Limit)
	resp = e.post(keyPath("q", key, "reset"), url.Values{})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	// A GET of an action's URL changes nothing: it is the page of a key
	// named "limit".
	resp, _ = e.do(e.request(http.MethodGet, keyPath("q", key, "limit"), nil))
	require.NotEqual(t, http.StatusSeeOther, resp.StatusCode)
	require.False(t, e.keyInfo("q", key).Override)
}

func TestKeyLimitReadOnly(t *testing.T) {
	e := setup(t, nil) // read-only
	ctx := context.Background()
	const key = "customer:1"
	_, err := e.client.SetLimit(ctx, "q", key, 0)
	require.NoError(t, err)
	e.insertKeyed("q", key, 1, "")

	for _, path := range []string{keyPath("q", key, "limit"), keyPath("q", key, "reset")} {
		resp := e.post(path, url.Values{"limit": {"5"}})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
	}
	info := e.keyInfo("q", key)
	require.Zero(t, info.Limit)
	require.True(t, info.Override)

	page := e.get(keyPath("q", key, ""), http.StatusOK)
	require.NotContains(t, page, `method="post"`)
	require.NotContains(t, page, "Set limit")
	require.Contains(t, page, "halted")
}

// TestIdleKeyPage checks what the page of a key says once all its jobs
// have finished: it is not found (an idle key keeps no state), and the
// page does not claim that no job of it was ever admitted, while the
// finished job's page links to it.
func TestIdleKeyPage(t *testing.T) {
	e := setup(t, nil)
	e.insertKeyed("q", "customer:42", 1, "")
	done := e.finish("q", batondriver.JobOutcomeCompleted, "")
	require.Contains(t, e.get("/queues/q/jobs/"+done.ID, http.StatusOK), `href="`+keyPath("q", "customer:42", "")+`"`)
	page := e.get(keyPath("q", "customer:42", ""), http.StatusNotFound)
	require.NotContains(t, page, "ever admitted")
	require.Contains(t, page, "idle")
}

// TestIdleKeyCanBeHaltedAhead: on a writable dashboard, the page of an
// idle key (no state, so not found) offers the limit forms, so that a key
// can be halted or limited before any job of it arrives, as the CLI's
// `limit set --new-key` can.
func TestIdleKeyCanBeHaltedAhead(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, Writable: true})
	page := e.get(keyPath("q", "customer:new", ""), http.StatusNotFound)
	require.Contains(t, page, `action="`+html.EscapeString(e.base+keyPath("q", "customer:new", "limit"))+`"`)
	require.Contains(t, page, "a limit set here is stored before any job of it arrives")
	resp := e.post(keyPath("q", "customer:new", "limit"), url.Values{"limit": {"0"}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	info := e.keyInfo("q", "customer:new")
	require.Zero(t, info.Limit)
	require.True(t, info.Override)
	require.Contains(t, e.get(keyPath("q", "customer:new", ""), http.StatusOK), "halted")
}

// TestIdleKeyReadOnly: read-only, an idle key's page is a plain not-found
// page, with no forms.
func TestIdleKeyReadOnly(t *testing.T) {
	e := setup(t, nil)
	require.NotContains(t, e.get(keyPath("q", "customer:new", ""), http.StatusNotFound), "Set limit")
}

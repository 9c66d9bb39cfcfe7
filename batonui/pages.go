package batonui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// sampleIfDue adds a sample to the throughput history when one is due.
// Every page calls it, so the history grows while any page is open (they
// refresh themselves); a failure only leaves a hole.
func (h *handler) sampleIfDue(ctx context.Context) {
	now := h.now()
	if !h.hist.due(now) {
		return
	}
	stats, err := h.client.QueueStatsAll(ctx)
	if err != nil {
		h.hist.abandon()
		return
	}
	h.hist.add(now, stats)
}

// queueStats reads every queue's stats. Some queues unread (a Cluster node
// down) still make a page of the others, with unread saying why the rest
// are missing; the throughput history leaves such a reading out. If the
// queues cannot be listed at all, it answers the request with the error
// and reports !ok.
func (h *handler) queueStats(w http.ResponseWriter, r *http.Request) (stats []*baton.QueueStats, unread string, ok bool) {
	stats, err := h.client.QueueStatsAll(r.Context())
	switch {
	case err == nil:
		return stats, "", true
	case stats == nil || r.Context().Err() != nil:
		h.backendError(w, r, err)
		return nil, "", false
	}
	h.cfg.Logger.Warn("batonui: some queues could not be read", "path", r.URL.Path, "err", err)
	return stats, "Some queues could not be read, and are missing below: " + err.Error(), true
}

type queueRow struct {
	*baton.QueueStats
	Hour finished // from the history
}

type overviewData struct {
	Unread  string // why some queues are missing, if they are
	Queues  []queueRow
	Totals  map[baton.JobState]int
	Keys    int // active keys of all queues
	Chart   chart
	Through *throughput
	Return  string // the overview, where its pause forms come back to
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	stats, unread, ok := h.queueStats(w, r)
	if !ok {
		return
	}
	now := h.now()
	if h.hist.due(now) && unread == "" {
		h.hist.add(now, stats)
	}
	t := h.hist.summary(now)
	d := &overviewData{Unread: unread, Totals: map[baton.JobState]int{}, Through: t, Chart: newChart(t.Buckets), Return: h.here(r)}
	for _, st := range stats {
		d.Queues = append(d.Queues, queueRow{QueueStats: st, Hour: t.Queues[st.Queue]})
		for s, n := range st.Counts {
			d.Totals[s] += n
		}
		d.Keys += st.Keys
	}
	h.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Data: d})
}

// chart is the throughput bar chart, laid out here so that the template
// only places rectangles.
type chart struct {
	Width, Height int
	Max           int // the value of the full height
	Bars          []bar
}

type bar struct {
	X, W         int
	OkY, OkH     int
	FailY, FailH int
	Measured     bool
	Start        time.Time
	finished
}

func newChart(buckets []bucket) chart {
	const barW, gap, height = 11, 1, 120
	c := chart{Width: len(buckets) * (barW + gap), Height: height}
	for _, b := range buckets {
		c.Max = max(c.Max, b.Completed+b.Failed)
	}
	scale := func(n int) int {
		if c.Max == 0 || n == 0 {
			return 0
		}
		return max(1, n*height/c.Max) // a non-zero count shows
	}
	for i, b := range buckets {
		okH, failH := scale(b.Completed), scale(b.Failed)
		c.Bars = append(c.Bars, bar{
			X: i * (barW + gap), W: barW,
			OkY: height - okH, OkH: okH,
			FailY: height - okH - failH, FailH: failH,
			Measured: b.Measured, Start: b.Start, finished: b.finished,
		})
	}
	return c
}

// pager is one page of a list.
type pager struct {
	Page, Pages int
	Total       int
	From, To    int // 1-based, inclusive; 0 when empty
	Prev, Next  string
}

// pageParam reads ?page=, 1-based; a bad one is an error.
func pageParam(r *http.Request) (int, error) {
	s := r.URL.Query().Get("page")
	if s == "" {
		return 1, nil
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 1<<20 {
		return 0, fmt.Errorf("bad page %q", s)
	}
	return p, nil
}

func (h *handler) newPager(r *http.Request, page, total, shown int) pager {
	size := h.cfg.PageSize
	p := pager{Page: page, Total: total, Pages: max(1, (total+size-1)/size)}
	if shown > 0 {
		p.From = (page-1)*size + 1
		p.To = p.From + shown - 1
	}
	link := func(n int) string {
		q := r.URL.Query()
		q.Del("done")
		q.Set("page", strconv.Itoa(n))
		return h.base + r.URL.Path + "?" + q.Encode()
	}
	if page > 1 {
		p.Prev = link(min(page-1, p.Pages))
	}
	if page < p.Pages {
		p.Next = link(page + 1)
	}
	return p
}

// here is the URL of the page being served, for forms to return to.
func (h *handler) here(r *http.Request) string {
	q := r.URL.Query()
	q.Del("done")
	u := h.base + r.URL.Path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

type queueData struct {
	Stats  *baton.QueueStats
	State  baton.JobState
	Tab    string // State, for the tabs
	Jobs   []*baton.JobRow
	Pager  pager
	Return string
	// Workers are the live processes that work the queue, with their
	// workers added up; nil if the list could not be read.
	Workers *processesData
}

func (h *handler) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	page, err := pageParam(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	h.sampleIfDue(r.Context())
	st, err := h.client.QueueStats(r.Context(), name)
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	state := baton.JobState(r.URL.Query().Get("state"))
	if state == "" {
		state = defaultState(st)
	}
	if !validState(state) {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Unknown job state %q.", state))
		return
	}
	jobs, total, err := h.list(r.Context(), name, state, page)
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	d := &queueData{Stats: st, State: state, Tab: string(state), Jobs: jobs, Pager: h.newPager(r, page, total, len(jobs)), Return: h.here(r)}
	// A queue nobody works is worth saying; a failed read of the list
	// only leaves the line out.
	if list, err := h.client.ProcessList(r.Context()); err == nil {
		d.Workers = workingProcesses(list, name)
	}
	h.render(w, r, http.StatusOK, "queue", &view{Title: "Queue " + name, Nav: "overview", Data: d})
}

// defaultState is the state a queue page opens on: the first of the
// states worth looking at that has jobs.
func defaultState(st *baton.QueueStats) baton.JobState {
	for _, s := range []baton.JobState{baton.JobStateRunning, baton.JobStateAvailable, baton.JobStateParked, baton.JobStateScheduled,
		baton.JobStateDead, baton.JobStateCancelled, baton.JobStateDropped, baton.JobStateCompleted} {
		if st.Counts[s] > 0 {
			return s
		}
	}
	return baton.JobStateAvailable
}

func (h *handler) list(ctx context.Context, queue string, state baton.JobState, page int) ([]*baton.JobRow, int, error) {
	size := h.cfg.PageSize
	return h.client.JobList(ctx, queue, state, &baton.JobListOpts{Limit: size, Offset: (page - 1) * size})
}

// event is one line of a job's timeline.
type event struct {
	At     time.Time
	What   string
	Detail string
	Bad    bool // a failure
}

type jobData struct {
	Job      *baton.JobRow
	Args     string
	Metadata string
	Output   string // what the latest completed run recorded (baton.RecordOutput)
	Timeline []event
	Here     string // where to go after retrying it
	Return   string // where to go after deleting it
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	h.sampleIfDue(r.Context())
	j, err := h.client.JobGet(r.Context(), r.PathValue("queue"), r.PathValue("id"))
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	d := &jobData{
		Job: j, Args: indentJSON(j.Args), Timeline: timeline(j, h.now()), Here: h.here(r),
		Return: h.base + "/queues/" + url.PathEscape(j.Queue) + "?state=" + url.QueryEscape(string(j.State)),
	}
	if len(j.Metadata) > 0 {
		d.Metadata = indentJSON(j.Metadata)
	}
	if len(j.Output) > 0 {
		d.Output = indentJSON(j.Output)
	}
	h.render(w, r, http.StatusOK, "job", &view{Title: "Job " + j.ID, Nav: "overview", Data: d})
}

// timeline orders what a job's timestamps and errors tell, oldest first.
func timeline(j *baton.JobRow, now time.Time) []event {
	ev := []event{{At: j.CreatedAt, What: "inserted", Detail: fmt.Sprintf("into %s, priority %d, at most %d attempts", j.Queue, j.Priority, j.MaxAttempts)}}
	var dropReason string
	for _, e := range j.Errors {
		if e.Attempt == 0 {
			// Not a failed attempt: why the job was dropped unrun.
			dropReason = e.Error
			continue
		}
		ev = append(ev, event{At: e.At, What: fmt.Sprintf("attempt %d failed", e.Attempt), Detail: e.Error, Bad: true})
	}
	if !j.AttemptedAt.IsZero() {
		ev = append(ev, event{At: j.AttemptedAt, What: fmt.Sprintf("attempt %d started", j.Attempt)})
	}
	if !j.ParkedAt.IsZero() {
		detail := fmt.Sprintf("waited for a slot of key %s", j.Key)
		if j.State == baton.JobStateParked {
			detail = fmt.Sprintf("waits for a slot of key %s, invisible to fetchers", j.Key)
		}
		ev = append(ev, event{At: j.ParkedAt, What: "parked", Detail: detail})
	}
	switch j.State {
	case baton.JobStateScheduled:
		ev = append(ev, event{At: j.RunAt, What: "due", Detail: "becomes available"})
	case baton.JobStateAvailable:
		if !j.RunAt.After(now) {
			ev = append(ev, event{At: j.RunAt, What: "available", Detail: "waiting for a worker"})
		}
	case baton.JobStateRunning:
		ev = append(ev, event{At: j.LeaseUntil, What: "lease ends", Detail: "unless its worker's heartbeat renews it"})
	}
	if !j.FinishedAt.IsZero() {
		e := event{At: j.FinishedAt, What: string(j.State), Bad: j.State == baton.JobStateDead || j.State == baton.JobStateCancelled}
		if j.State == baton.JobStateDropped {
			e.Detail = dropReason
		}
		ev = append(ev, e)
	}
	sort.SliceStable(ev, func(a, b int) bool { return ev[a].At.Before(ev[b].At) })
	return ev
}

type deadQueue struct {
	Name            string
	Dead, Cancelled int
}

type deadData struct {
	Unread   string // why some queues are missing, if they are
	Queues   []deadQueue
	Selected string
	// SelDead and SelCancelled count the selected queue's dead set.
	SelDead, SelCancelled int
	State                 baton.JobState
	Jobs                  []*baton.JobRow
	Pager                 pager
	Return                string
}

// dead lists the dead set of one queue at a time: dead or cancelled jobs,
// to retry or delete.
func (h *handler) dead(w http.ResponseWriter, r *http.Request) {
	page, err := pageParam(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	stats, unread, ok := h.queueStats(w, r)
	if !ok {
		return
	}
	if now := h.now(); h.hist.due(now) && unread == "" {
		h.hist.add(now, stats)
	}
	d := &deadData{Unread: unread, Selected: r.URL.Query().Get("queue"), State: baton.JobState(r.URL.Query().Get("state")), Return: h.here(r)}
	if msg := badQueue(d.Selected); d.Selected != "" && msg != "" {
		h.fail(w, r, http.StatusBadRequest, msg)
		return
	}
	for _, st := range stats {
		dq := deadQueue{Name: st.Queue, Dead: st.Counts[baton.JobStateDead], Cancelled: st.Counts[baton.JobStateCancelled]}
		if dq.Dead+dq.Cancelled > 0 {
			d.Queues = append(d.Queues, dq)
		}
		if st.Queue == d.Selected {
			d.SelDead, d.SelCancelled = dq.Dead, dq.Cancelled
		}
	}
	if d.State != "" && d.State != baton.JobStateDead && d.State != baton.JobStateCancelled {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The dead set holds dead and cancelled jobs, not %q.", d.State))
		return
	}
	if d.Selected == "" && len(d.Queues) > 0 {
		d.Selected = d.Queues[0].Name
		d.SelDead, d.SelCancelled = d.Queues[0].Dead, d.Queues[0].Cancelled
	}
	if d.State == "" {
		// No state asked for (a queue's tab): the one that has its jobs.
		d.State = baton.JobStateDead
		if d.SelDead == 0 && d.SelCancelled > 0 {
			d.State = baton.JobStateCancelled
		}
	}
	if d.Selected != "" {
		jobs, total, err := h.list(r.Context(), d.Selected, d.State, page)
		if err != nil {
			h.backendError(w, r, err)
			return
		}
		d.Jobs, d.Pager = jobs, h.newPager(r, page, total, len(jobs))
	}
	h.render(w, r, http.StatusOK, "dead", &view{Title: "Dead jobs", Nav: "dead", Data: d})
}

type lockHolder struct {
	Fence uint64
	Until time.Time
}

type lockView struct {
	Key         string
	Limit       int
	Override    bool
	LastFence   uint64
	Holders     []lockHolder
	Waiters     []time.Time // when each place expires unless refreshed
	WaiterCount int
	Err         string
}

type locksData struct {
	Configured bool
	Query      string
	Looked     *lockView
	Watched    []*lockView
	// InUse is a page of the keys in use (locks.go); ListErr says why
	// there is none.
	InUse   []lockRow
	Pager   pager
	ListErr string
}

// maxWaitersShown bounds the waiters a lock shows.
const maxWaitersShown = 20

// locks lists the standalone lock keys in use, a page at a time, and
// inspects keys by name. It never shows holders' tokens: a token is what
// releases or extends a lease.
func (h *handler) locks(w http.ResponseWriter, r *http.Request) {
	h.sampleIfDue(r.Context())
	d := &locksData{Configured: h.cfg.Locker != nil, Query: r.URL.Query().Get("key")}
	page, err := pageParam(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if d.Configured {
		h.listLocks(r, d, page)
		for _, k := range h.cfg.LockKeys {
			d.Watched = append(d.Watched, h.inspect(r.Context(), k))
		}
		if d.Query != "" && !slices.Contains(h.cfg.LockKeys, d.Query) {
			d.Looked = h.inspect(r.Context(), d.Query)
		}
	}
	h.render(w, r, http.StatusOK, "locks", &view{Title: "Locks", Nav: "locks", Data: d})
}

func (h *handler) inspect(ctx context.Context, key string) *lockView {
	v := &lockView{Key: key}
	info, err := h.cfg.Locker.Inspect(ctx, key)
	if err != nil {
		// A key the user typed that no key can be is shown, not logged.
		if !errors.Is(err, context.Canceled) && !errors.Is(err, batondriver.ErrBadParams) {
			h.cfg.Logger.Error("batonui: inspect lock", "err", err)
		}
		v.Err = err.Error()
		return v
	}
	return h.newLockView(info)
}

// schedulesData is the schedules page: the schedules registered in the
// backend, then those of Config.PeriodicJobs that are not (yet).
type schedulesData struct {
	Registered []*baton.ScheduleInfo
	Configured []scheduleView
}

type scheduleView struct {
	Name string
	Spec string // "" if the Schedule has no String
	Next []time.Time
}

func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	h.sampleIfDue(r.Context())
	list, err := h.client.ScheduleList(r.Context())
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	d := &schedulesData{Registered: list}
	registered := map[string]bool{}
	for _, s := range list {
		registered[s.Name] = true
	}
	now := h.now()
	for _, p := range h.cfg.PeriodicJobs {
		if registered[p.Name] {
			continue
		}
		v := scheduleView{Name: p.Name}
		if s, ok := p.Schedule.(fmt.Stringer); ok {
			v.Spec = s.String()
		}
		t := now
		for range 3 {
			t = p.Schedule.Next(t)
			v.Next = append(v.Next, t)
		}
		d.Configured = append(d.Configured, v)
	}
	h.render(w, r, http.StatusOK, "schedules", &view{Title: "Schedules", Nav: "schedules", Data: d})
}

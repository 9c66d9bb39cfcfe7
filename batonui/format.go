package batonui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// states are the job states in the order the pages show them: waiting,
// running, then the end states.
var states = []baton.JobState{
	baton.JobStateAvailable, baton.JobStateParked, baton.JobStateScheduled, baton.JobStateRunning,
	baton.JobStateCompleted, baton.JobStateDead, baton.JobStateCancelled, baton.JobStateDropped,
}

func validState(s baton.JobState) bool {
	for _, st := range states {
		if s == st {
			return true
		}
	}
	return false
}

// funcs are the templates' helpers. Every one returns plain strings, which
// html/template escapes for where they land: none returns template.HTML.
func (h *handler) funcs() template.FuncMap {
	return template.FuncMap{
		"states": func() []baton.JobState { return states },
		"count": func(st *baton.QueueStats, s baton.JobState) int {
			if st == nil {
				return 0
			}
			return st.Counts[s]
		},
		"ago":      func(t time.Time) string { return ago(h.now(), t) },
		"abs":      absTime,
		"iso":      isoTime,
		"dur":      shortDuration,
		"waited":   func(t time.Time) string { return waited(h.now(), t) },
		"queueURL": func(q string) string { return h.base + "/queues/" + url.PathEscape(q) },
		"jobURL": func(q, id string) string {
			return h.base + "/queues/" + url.PathEscape(q) + "/jobs/" + url.PathEscape(id)
		},
		"keysURL":   func(q string) string { return h.keysURL(q) },
		"keyURL":    func(q, key string) string { return h.keyURL(q, key) },
		"keyAction": func(q, key, action string) string { return h.keyActionURL(q, key, action) },
		"maxLimit":  func() int { return baton.MaxKeyLimit },
		"tabs":      func(st *baton.QueueStats, cur string) queueTabs { return queueTabs{Stats: st, Current: cur} },
		"preview":   func(b []byte) string { return truncate(compactJSON(b), 100) },
		"truncate":  truncate,
		"lastError": lastError,
		"canRetry":  canRetry,
		"canDelete": canDelete,
		"canCancel": canCancel,
		"jobTime":   jobTime,
		"timeLabel": timeLabel,
		"writable":  func() bool { return h.cfg.Writable },
		"actions": func(j *baton.JobRow, ret, deleteRet string) jobActions {
			return jobActions{Job: j, Return: ret, DeleteReturn: deleteRet}
		},
		"pauseArgs": func(q string, paused bool, ret string) pauseArgs {
			return pauseArgs{Queue: q, Paused: paused, Return: ret}
		},
		"maxErrors": func() int { return batondriver.MaxErrors },
		"inc":       func(i int) int { return i + 1 },
		"sub":       func(a, b int) int { return a - b },
		"add":       func(a, b int) int { return a + b },
	}
}

// jobActions is what the jobactions template needs: the job and where to
// go after retrying it and after deleting it.
type jobActions struct {
	Job                  *baton.JobRow
	Return, DeleteReturn string
}

// queueTabs is what the queuetabs template needs: the queue's counts and
// the tab shown, a job state or "keys".
type queueTabs struct {
	Stats   *baton.QueueStats
	Current string
}

// pauseArgs is what the pauseform template needs.
type pauseArgs struct {
	Queue  string
	Paused bool
	Return string
}

// jobTime is the time a list shows for a job in its state.
func jobTime(j *baton.JobRow) time.Time {
	switch j.State {
	case baton.JobStateScheduled, baton.JobStateAvailable:
		return j.RunAt
	case baton.JobStateParked:
		return j.ParkedAt
	case baton.JobStateRunning:
		return j.AttemptedAt
	default:
		return j.FinishedAt
	}
}

// timeLabel names the column jobTime fills.
func timeLabel(s baton.JobState) string {
	switch s {
	case baton.JobStateScheduled:
		return "Due"
	case baton.JobStateAvailable:
		return "Available since"
	case baton.JobStateParked:
		return "Parked since"
	case baton.JobStateRunning:
		return "Started"
	case baton.JobStateDropped:
		return "Dropped"
	default:
		return "Finished"
	}
}

// ago says how long before now t was, or how long until it is.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return shortDuration(d) + " ago"
	default:
		return "in " + shortDuration(-d)
	}
}

// waited says how long ago t was, as a bare duration: how long a job parked
// at t has waited.
func waited(now, t time.Time) string {
	switch d := now.Sub(t); {
	case t.IsZero():
		return ""
	case d < time.Second:
		return "under 1s"
	default:
		return shortDuration(d)
	}
}

func absTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
}

// isoTime is t for a datetime attribute: RFC 3339 in UTC, to the
// millisecond. absTime's " UTC" suffix is not a valid HTML datetime.
func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// shortDuration writes d with its two largest units: 4s, 3m 12s, 2h 5m, 3d 4h.
func shortDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

// truncate cuts s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// compactJSON is b on one line, or b as it is if it is not JSON.
func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return unescapeHTML(buf.Bytes())
}

// indentJSON is b pretty-printed, or b as it is if it is not JSON.
func indentJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Indent(&buf, b, "", "  ") != nil {
		return string(b)
	}
	return unescapeHTML(buf.Bytes())
}

// unescapeHTML turns the escapes \u003c, \u003e and \u0026 that Go's
// encoding/json puts in strings back into <, > and &, so that a person
// reads the text as it was: the page is safe because html/template
// escapes whatever it shows, not because of these escapes. b is valid
// JSON, and stays valid and equivalent.
func unescapeHTML(b []byte) string {
	var out strings.Builder
	out.Grow(len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out.WriteByte(c)
			continue
		}
		// An escape: two bytes, or six for \uXXXX.
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch strings.ToLower(string(b[i+2 : i+6])) {
			case "003c":
				out.WriteByte('<')
			case "003e":
				out.WriteByte('>')
			case "0026":
				out.WriteByte('&')
			default:
				out.Write(b[i : i+6])
			}
			i += 5
			continue
		}
		out.Write(b[i : i+2])
		i++
	}
	return out.String()
}

func lastError(j *baton.JobRow) string {
	if len(j.Errors) == 0 {
		return ""
	}
	return j.Errors[len(j.Errors)-1].Error
}

// canRetry, canDelete and canCancel mirror what the admin API accepts, so that no
// page offers an action bound to fail. An available job can be retried too
// (baton.JobRetryable), but it is already waiting for a worker: a Retry
// button on every row of a queue would not make it run any sooner.
func canRetry(j *baton.JobRow) bool {
	return baton.JobRetryable(j.State) && j.State != baton.JobStateAvailable
}

func canDelete(j *baton.JobRow) bool { return j.State != baton.JobStateRunning }

// canCancel: a job JobCancel takes (baton.JobCancellable), but a running
// one already asked to stop.
func canCancel(j *baton.JobRow) bool {
	return baton.JobCancellable(j.State) && (j.State != baton.JobStateRunning || j.CancelRequestedAt.IsZero())
}

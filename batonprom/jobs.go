package batonprom

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/batonhq/baton"
)

// OnJobEnd records one finished attempt; set it as baton.Config.OnJobEnd.
// It counts jobs_finished_total by outcome and observes job_run_seconds
// and job_wait_seconds.
func (m *Metrics) OnJobEnd(ev *baton.JobEvent) {
	queue, kind := label(ev.Queue), label(ev.Kind)
	m.finished.WithLabelValues(queue, kind, label(string(ev.Outcome))).Inc()
	m.run.WithLabelValues(queue, kind).Observe(ev.Run.Seconds())
	m.wait.WithLabelValues(queue, kind).Observe(ev.Wait.Seconds())
}

// InsertMiddleware counts the jobs of every insert call in
// jobs_inserted_total by status: inserted, dropped (stored but dropped at
// once by its key's OnBusyDrop), duplicate, replaced (a unique twin
// resolved it) or rejected (OnBusyFail, UniqueReject). Add it to
// baton.Config.InsertMiddleware. A call that fails as a whole counts
// nothing. A job refused by OnBusyFail comes back without a row, so its
// queue label is its InsertOpts.Queue, empty if it had none.
//
// Delayed jobs dropped when due are not inserts: jobs_dropped_total, read
// from the backend, counts every drop.
func (m *Metrics) InsertMiddleware(ctx context.Context, jobs []*baton.InsertManyParams, next func(context.Context) ([]*baton.InsertResult, error)) ([]*baton.InsertResult, error) {
	res, err := next(ctx)
	if len(res) != len(jobs) {
		return res, err
	}
	for i, r := range res {
		j := jobs[i]
		if r == nil || j == nil || j.Args == nil {
			continue
		}
		status := string(r.Status)
		var queue string
		switch {
		case r.Job != nil:
			queue = r.Job.Queue
			if r.Status == baton.JobInserted && r.Job.State == baton.JobStateDropped {
				status = "dropped"
			}
		case j.Opts != nil:
			queue = j.Opts.Queue
		}
		m.inserted.WithLabelValues(label(queue), label(j.Args.Kind()), status).Inc()
	}
	return res, err
}

// label makes s a valid label value. Kinds may hold any bytes, and
// Prometheus panics on a label value that is not UTF-8.
func label(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

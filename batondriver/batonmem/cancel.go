package batonmem

import (
	"context"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// JobCancel implements batondriver.JobDriver. A queued job ends cancelled
// at once; a running one keeps running with its cancel request, which
// JobExtend reports and every way out of running but completion turns into
// cancelled (see cancelled, and where JobFinish, JobFetch's recovery,
// giveBack and unchain call it).
func (d *Driver) JobCancel(ctx context.Context, p *batondriver.JobCancelParams) (*batondriver.JobRow, error) {
	if err := batondriver.CheckJobCancel(p); err != nil {
		return nil, err
	}
	q, j, unlock, err := d.lockJob(ctx, p.Queue, p.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	now := time.Now()
	switch st := j.row.State; {
	case st == batondriver.JobStateRunning:
		if !j.cancelRequested() {
			j.row.CancelRequestedAt, j.cancelReason = now, p.Reason
		}
		d.jobs.notify(p.Queue, batondriver.QueueNotice{Cancel: p.ID})
	case queued(st):
		q.remove(j)
		woken := 0
		switch st {
		case batondriver.JobStateAvailable:
			woken = q.release(j)
		case batondriver.JobStateParked:
			woken = q.promote(q.keys[j.row.Key])
		}
		j.cancelReason = p.Reason
		q.cancelled(j, "", now)
		q.wake(woken)
	default:
		return nil, batondriver.NotCancellable(p.ID, st)
	}
	return j.copyRow(), nil
}

// cancelRequested reports whether an admin asked to cancel j while it ran.
func (j *job) cancelRequested() bool { return !j.row.CancelRequestedAt.IsZero() }

// cancelled ends j, in no state and holding no slot, cancelled on request:
// its error the request's reason followed by msg (batondriver.
// CancelledError), its cancel request cleared, its unique claim released
// as a cancelled job's is.
func (q *queueState) cancelled(j *job, msg string, now time.Time) {
	j.fail(now, batondriver.CancelledError(j.cancelReason, msg))
	j.row.CancelRequestedAt, j.cancelReason = time.Time{}, ""
	q.end(j, batondriver.JobStateCancelled, now)
	q.unclaim(j)
}

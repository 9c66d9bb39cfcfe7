package baton

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/batonhq/baton/batondriver"
)

// The admin API: what the CLI and the dashboard use, on every backend.

// ErrJobNotFound is returned for a job that does not exist (any more).
var ErrJobNotFound = batondriver.ErrJobNotFound

// JobGet returns a job of queue.
func (c *Client) JobGet(ctx context.Context, queue, id string) (*JobRow, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: job get: %w", err)
	}
	row, err := c.driver.JobGet(ctx, &batondriver.JobGetParams{Queue: queue, ID: id})
	if err != nil {
		return nil, fmt.Errorf("baton: job %s in %q: %w", id, queue, err)
	}
	return row, nil
}

// JobListOpts page through a list and narrow it; nil means the first 100
// jobs of the state.
type JobListOpts struct {
	Limit  int // at most 1000; default 100
	Offset int
	// Key, if set, lists only the jobs parked for that concurrency key, in
	// the order they will run: the head, promoted when a slot of the key
	// frees, first. The state must be JobStateParked (KeyGet lists the
	// key's holders, available and running); the total counts the key's
	// parked jobs. It reads the key's own queue of parked jobs, so it
	// costs the same whatever else is parked.
	Key string
}

// JobList lists a queue's jobs in one state, oldest first (available jobs
// in the order they will be fetched: priority, then when they became
// available), and how many there are in all. With opts.Key, the jobs
// parked for that key, in the order they will run.
func (c *Client) JobList(ctx context.Context, queue string, state JobState, opts *JobListOpts) ([]*JobRow, int, error) {
	if err := checkQueue(queue); err != nil {
		return nil, 0, fmt.Errorf("baton: job list: %w", err)
	}
	o := JobListOpts{Limit: 100}
	if opts != nil {
		o = *opts
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	if o.Limit < 0 || o.Limit > 1000 || o.Offset < 0 {
		return nil, 0, fmt.Errorf("baton: job list: limit %d must be 1..1000 and offset %d not negative", o.Limit, o.Offset)
	}
	res, err := c.driver.JobList(ctx, &batondriver.JobListParams{Queue: queue, State: state, Limit: o.Limit, Offset: o.Offset, Key: o.Key})
	if err != nil {
		if o.Key != "" {
			return nil, 0, fmt.Errorf("baton: list %s jobs of key %q in %q: %w", state, o.Key, queue, err)
		}
		return nil, 0, fmt.Errorf("baton: list %s jobs of %q: %w", state, queue, err)
	}
	return res.Jobs, res.Total, nil
}

// JobRetry makes a dead, cancelled, dropped or scheduled job available now,
// with its attempts reset (a keyed job whose key is busy is parked); a job
// unique while queued or until done takes its unique claim back unless a
// twin holds it. It refuses a job that JobRetryable says cannot be retried.
func (c *Client) JobRetry(ctx context.Context, queue, id string) (*JobRow, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: job retry: %w", err)
	}
	row, err := c.driver.JobRetry(ctx, &batondriver.JobGetParams{Queue: queue, ID: id})
	if err != nil {
		return nil, fmt.Errorf("baton: retry job %s in %q: %w", id, queue, err)
	}
	return row, nil
}

// JobRetryable reports whether JobRetry takes a job in state, on every
// backend: dead, cancelled, dropped, scheduled and available jobs can be
// retried (an available one keeps its place in the queue). Running, parked
// and completed jobs cannot: JobRetry refuses them with an error wrapping
// batondriver.ErrBadParams. A tool that offers a retry asks this first, so
// that it never offers one bound to fail.
func JobRetryable(state JobState) bool {
	switch state {
	case JobStateDead, JobStateCancelled, JobStateDropped, JobStateScheduled, JobStateAvailable:
		return true
	}
	return false
}

// JobDelete removes a job that is not running.
func (c *Client) JobDelete(ctx context.Context, queue, id string) error {
	if err := checkQueue(queue); err != nil {
		return fmt.Errorf("baton: job delete: %w", err)
	}
	if err := c.driver.JobDelete(ctx, &batondriver.JobGetParams{Queue: queue, ID: id}); err != nil {
		return fmt.Errorf("baton: delete job %s in %q: %w", id, queue, err)
	}
	return nil
}

// cancelReason is the error JobCancel records for the jobs it cancels.
const cancelReason = "cancelled by the admin API"

// JobCancel cancels a job of queue, on every backend, for every process
// sharing it:
//
//   - A scheduled, parked or available job ends cancelled at once, in the
//     dead set with the error "cancelled by the admin API". A job holding a
//     slot of its concurrency key frees it, and the key's next parked job
//     is promoted in the same step; its unique claim ends as a cancelled
//     job's does.
//   - A running job is asked to stop: the request is stored in the backend
//     and returned job shows it (CancelRequestedAt). The worker running the
//     job hears of it at once from the queue's notices — or, should the
//     notice be lost, at its next heartbeat (Config.HeartbeatInterval) —
//     and cancels the handler's context with the cause ErrJobCancelled (a
//     job whose lease is still on its way to the worker is given back
//     unrun as it comes, and ends cancelled). The
//     job then ends cancelled, the handler's error after the reason,
//     whatever the handler returns — an error, JobSnooze, JobAgain,
//     JobCancel — or if Stop gives it back; but a handler that returns nil
//     completes it: a job that finished before it noticed stays completed
//     (as River's JobCancel does). A job chained behind it
//     (docs/concurrency.md) still runs. If the worker died, the job is not
//     retried: when its lease expires it is taken back cancelled.
//
// It returns the job as the call left it. A completed, cancelled, dead or
// dropped job cannot be cancelled (JobCancellable): the error wraps
// batondriver.ErrBadParams and names its state. An unknown job is
// ErrJobNotFound.
func (c *Client) JobCancel(ctx context.Context, queue, id string) (*JobRow, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: job cancel: %w", err)
	}
	row, err := c.driver.JobCancel(ctx, &batondriver.JobCancelParams{Queue: queue, ID: id, Reason: cancelReason})
	if err != nil {
		return nil, fmt.Errorf("baton: cancel job %s in %q: %w", id, queue, err)
	}
	return row, nil
}

// JobCancellable reports whether JobCancel takes a job in state, on every
// backend: scheduled, parked, available and running jobs can be cancelled
// (a running one is asked to stop). Completed, cancelled, dead and dropped
// jobs cannot. A tool that offers a cancel asks this first.
func JobCancellable(state JobState) bool {
	switch state {
	case JobStateScheduled, JobStateParked, JobStateAvailable, JobStateRunning:
		return true
	}
	return false
}

// QueueStats counts a queue's jobs by state.
type QueueStats = batondriver.QueueStatsResult

// QueueStats returns a queue's counts by state and whether it is paused.
func (c *Client) QueueStats(ctx context.Context, queue string) (*QueueStats, error) {
	if err := checkQueue(queue); err != nil {
		return nil, fmt.Errorf("baton: queue stats: %w", err)
	}
	res, err := c.driver.QueueStats(ctx, &batondriver.QueueParams{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("baton: stats of %q: %w", queue, err)
	}
	return res, nil
}

// QueueStatsAll returns the stats of every queue that ever had a job (see
// QueueList), sorted by queue name; none is an empty slice. Each queue is
// read on its own, so the figures are not one snapshot of the backend.
//
// If the queues cannot be listed it returns nil and the error. A queue whose
// stats cannot be read is left out and the next is read, unless ctx is done,
// which ends the reading at once; the result then holds the queues that were
// read, and the error joins (errors.Join) one error per queue that failed. A
// caller that wants all or nothing checks the error first.
func (c *Client) QueueStatsAll(ctx context.Context) ([]*QueueStats, error) {
	names, err := c.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	out := make([]*QueueStats, 0, len(names))
	var errs []error
	for _, q := range names {
		st, err := c.QueueStats(ctx, q)
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		out = append(out, st)
	}
	return out, errors.Join(errs...)
}

// QueueList names the queues that ever had a job.
func (c *Client) QueueList(ctx context.Context) ([]string, error) {
	qs, err := c.driver.QueueList(ctx)
	if err != nil {
		return nil, fmt.Errorf("baton: list queues: %w", err)
	}
	return qs, nil
}

// QueuePause stops every process from fetching from queue; inserts go on
// and running jobs finish. QueueResume undoes it.
func (c *Client) QueuePause(ctx context.Context, queue string) error {
	return c.queuePause(ctx, queue, false)
}

// QueueResume lets every process fetch from queue again.
func (c *Client) QueueResume(ctx context.Context, queue string) error {
	return c.queuePause(ctx, queue, true)
}

func (c *Client) queuePause(ctx context.Context, queue string, resume bool) error {
	if err := checkQueue(queue); err != nil {
		return fmt.Errorf("baton: queue pause: %w", err)
	}
	if err := c.driver.QueuePause(ctx, &batondriver.QueuePauseParams{Queue: queue, Resume: resume}); err != nil {
		return fmt.Errorf("baton: pause/resume %q: %w", queue, err)
	}
	return nil
}

// MaxKeyLimit is the largest limit of a concurrency key: SetLimit and
// ConcurrencyOpts.Limit refuse a bigger one (an error wrapping
// batondriver.ErrBadParams), and the baton command and the dashboard
// (batonui) check against it before they call SetLimit.
const MaxKeyLimit = batondriver.MaxKeyLimit

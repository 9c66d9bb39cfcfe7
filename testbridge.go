package baton

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/testbridge"
)

// Package batontest runs a job as a client's worker does, through these
// (internal/testbridge says what each does).
func init() {
	testbridge.Kind = func(w *Workers, kind string) (WorkerOpts, func(context.Context, *JobRow) error, bool) {
		if w == nil || w.kinds[kind] == nil {
			return WorkerOpts{}, nil, false
		}
		kw := w.kinds[kind]
		return kw.opts, kw.run, true
	}
	testbridge.Attempt = func(ctx context.Context, c *Client, row *JobRow, id string) (*testbridge.Attempted, error) {
		f, err := c.cfg.attempt(ctx, row.Queue, row, c.cfg.attemptTimeout(row.Kind))
		if f == nil {
			return &testbridge.Attempted{Err: err}, nil
		}
		f.ID = id
		// Recorded even if ctx ended, standing for a cancel or a stop.
		_, ferr := c.driver.JobFinish(context.WithoutCancel(ctx), &batondriver.JobFinishParams{Queue: row.Queue,
			Finished: []*batondriver.JobFinish{f}, Retention: c.cfg.CompletedRetention})
		if ferr != nil {
			return nil, fmt.Errorf("baton: recording the outcome of job %s: %w", row.ID, ferr)
		}
		return &testbridge.Attempted{Finish: f, Err: err}, nil
	}
}

// Package testbridge hands package batontest what it needs of package
// baton's unexported machinery, so that batontest runs a job as a
// client's worker does without baton exporting how. Package baton sets
// the variables in an init function (baton/testbridge.go); batontest,
// which imports baton, finds them set. Each is declared any, since this
// package cannot import baton, and its doc names its type.
package testbridge

import "github.com/batonhq/baton/batondriver"

// Kind is a func(w *baton.Workers, kind string) (opts baton.WorkerOpts,
// work func(context.Context, *baton.JobRow) error, ok bool): the settings
// kind was registered with in w, and its worker, which decodes a row's
// args as a client does before it calls the handler; ok is false for a
// kind w does not register.
var Kind any

// Attempt is a func(ctx context.Context, c *baton.Client, row
// *baton.JobRow, id string) (*Attempted, error): it runs one attempt of
// row, leased from c's backend, as c's workers run it (the kind's timeout,
// the worker middleware, panics recovered, OnJobEnd told), and records its
// outcome there as they do, for the job id. id is row's ID in c's backend;
// row.ID, which the handler and OnJobEnd see, may differ (the ID of the
// job batontest.WorkJob copied). Its error is the backend's, recording the
// outcome.
var Attempt any

// Attempted is what Attempt did.
type Attempted struct {
	// Finish is the outcome recorded; nil if none may be (ctx's cause is
	// baton.ErrLeaseLost).
	Finish *batondriver.JobFinish
	// Err is what the attempt returned.
	Err error
}

// Package batontest helps the tests of code that uses Baton: it asserts
// which jobs were inserted, and runs one job's handler the way a worker
// would, in the test's goroutine.
//
// The Require… helpers look at a client's jobs through its admin API
// (Client.QueueList, Client.JobList) alone, so they work on every backend,
// in memory or on Redis:
//
//	job := batontest.RequireInserted[SyncArgs](ctx, t, client, &batontest.RequireInsertedOpts{Queue: "sync"})
//	batontest.RequireNotInserted[EmailArgs](ctx, t, client, nil)
//	batontest.RequireManyInserted(ctx, t, client, []batontest.ExpectedJob{{Args: SyncArgs{}}, {Args: EmailArgs{}}})
//
// Each lists the jobs as they are when it is called, one state after
// another: it is meant for a client at rest (nothing being inserted or
// run meanwhile), as in most tests. A job that moves between states while
// the helper lists them may be missed or, with its new state, seen once.
//
// Work runs one attempt of a handler as a client's worker does, in the
// test's goroutine, on a private in-memory backend: the kind's settings
// and timeout, the Config's and the kind's worker middleware, panics
// recovered, and the outcome recorded:
//
//	res := batontest.Work(ctx, t, &SyncWorker{}, SyncArgs{UserID: 42}, nil)
//	// res.Err is what the attempt returned; res.Outcome and res.Delay what
//	// a worker recorded for it (completed, retry after the kind's backoff,
//	// snooze…); res.Recorded the job after (scheduled, dead, cancelled…).
//	res = batontest.Work(ctx, t, nil, SyncArgs{UserID: 42}, &batontest.WorkOpts{Config: appConfig})
//	// runs the worker appConfig.Workers registers for the kind, as
//	// production does.
//
// WorkJob does the same for a job the code under test inserted, on a copy
// of its row, so that the handler sees the job as it was stored (its ID,
// options and args, the attempt a worker runs next) and the client's
// backend is left as it was:
//
//	job := batontest.RequireInserted[SyncArgs](ctx, t, client, nil)
//	res = batontest.WorkJob(ctx, t, nil, job.JobRow, &batontest.WorkOpts{Config: appConfig})
//
// On failure every helper says what it expected and what it found, and
// stops the test with tb.Fatalf.
package batontest

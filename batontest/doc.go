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
// Work runs a handler without a client:
//
//	res := batontest.Work(ctx, t, &SyncWorker{}, SyncArgs{UserID: 42}, nil)
//	// res.Err is what the handler returned; res.Outcome what a worker
//	// would record for it (baton.OutcomeOf): completed, retry, snooze…
//
// On failure every helper says what it expected and what it found, and
// stops the test with tb.Fatalf.
package batontest

// Package baton is background job processing for Go whose centre is locking
// and concurrency control: a job can say "one of me per user at a time", "at
// most 10 of us per customer", "drop me if my twin is running", and Baton
// keeps that promise across every process sharing the backend.
//
// A kind of job is a type implementing JobArgs; a Worker[T] runs it. A Client
// inserts jobs and, once started, runs them with a pool of workers:
//
//	workers := baton.NewWorkers()
//	baton.AddWorker(workers, &SyncWorker{}, nil)
//	client, err := baton.NewClient(driver, &baton.Config{Workers: workers})
//	err = client.Start(ctx)
//	_, err = client.Insert(ctx, SyncArgs{UserID: 42}, nil)
//	err = client.Stop(ctx)
//
// Guarantees, on every backend (docs/job-states.md has the state machine):
//
//   - A job is never lost. It is leased to one worker at a time; the lease is
//     renewed by a heartbeat and, if its process dies, the job runs again once
//     the lease expires, with the attempt counted.
//   - A late owner never overwrites a newer state: outcomes are recorded only
//     with the job's current lease, and a handler whose lease is lost has its
//     context cancelled (cause ErrLeaseLost).
//   - Failed jobs are retried with exponential backoff and jitter until their
//     attempts are used up, then kept in the dead set with their errors.
//     JobSnooze and JobCancel steer a job from its handler, and
//     RecordOutput keeps its result with the completed job.
//   - Idle workers learn of a new job at once (one waiting process is woken
//     per job, not all of them); scheduled jobs start when due.
//   - Stop waits for running jobs, then returns those it had to cut off to
//     their queue without counting the attempt.
//   - Every started client is in the list of live processes (ProcessList)
//     from Start until its Stop returns; one that crashed or lost the
//     backend drops out Config.ProcessTTL after its last beat, by the
//     backend's clock.
//   - Recurring schedules (Config.PeriodicJobs, with Cron or Every) insert
//     each tick once, however many processes run them, and are registered
//     in the backend for ScheduleList to list.
//   - A job may carry a concurrency key with a limit (ConcurrencyOpts; 1, the
//     default, is a mutex per key): at most that many of the key's jobs hold a
//     slot (available or running) at once, across every process. Jobs over
//     the limit are parked where no fetcher sees them and promoted in the
//     step that frees a slot, or dropped, rescheduled or refused by their
//     OnBusy policy. Limits live in the backend and change at runtime
//     (Client.SetLimit; 0 halts a key). A keyed job's run carries a fencing
//     token, Job.Fence, strictly rising per key. docs/concurrency.md has the
//     contract, with uniqueness (UniqueOpts) and JobAgain.
//
// Package batonlock has Baton's fair, fenced, heartbeat-kept locks and
// semaphores, for work that is not a job.
package baton

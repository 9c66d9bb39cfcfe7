package baton_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// SyncArgs are the arguments of a job that syncs one user.
type SyncArgs struct {
	UserID int `json:"user_id"`
}

// Kind names the job kind; it is stored with every job.
func (SyncArgs) Kind() string { return "sync_user" }

// A typed job, its worker, one insert and a graceful stop.
func Example() {
	done := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		fmt.Printf("syncing user %d (attempt %d)\n", job.Args.UserID, job.Attempt)
		close(done)
		return nil
	}), nil)

	client, err := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := client.Insert(ctx, SyncArgs{UserID: 42}, nil); err != nil {
		panic(err)
	}
	<-done
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	fmt.Println("stopped:", client.Stop(stopCtx))
	// Output:
	// syncing user 42 (attempt 1)
	// stopped: <nil>
}

// ReportArgs are the arguments of a job that builds a heavy report.
type ReportArgs struct {
	Month string `json:"month"`
}

// Kind names the job kind.
func (ReportArgs) Kind() string { return "build_report" }

// A queue's share of the workers: this process builds one report at a
// time, however many wait, and its other workers serve the default queue.
func ExampleQueueConfig() {
	var running, most atomic.Int32
	var built sync.WaitGroup
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[ReportArgs](func(ctx context.Context, job *baton.Job[ReportArgs]) error {
		defer built.Done()
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		running.Add(-1)
		return nil
	}), &baton.WorkerOpts{Queue: "reports"})

	client, _ := baton.NewClient(batonmem.New(), &baton.Config{
		Workers: workers, Concurrency: 10, Logger: quiet,
		Queues: []baton.QueueConfig{{Name: "default"}, {Name: "reports", MaxWorkers: 1}},
	})
	ctx := context.Background()
	_ = client.Start(ctx)
	for _, month := range []string{"2026-07", "2026-08", "2026-09", "2026-10"} {
		built.Add(1)
		_, _ = client.Insert(ctx, ReportArgs{Month: month}, nil)
	}
	built.Wait()
	_ = client.Stop(ctx)
	fmt.Println("most reports built at once:", most.Load())
	// Output:
	// most reports built at once: 1
}

// A handler's result, kept with its job: RecordOutput stores it as the
// attempt completes, and JobGet returns it (as do `baton jobs show` and
// the dashboard's job page) for as long as the completed job is kept.
func ExampleRecordOutput() {
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[ReportArgs](func(ctx context.Context, job *baton.Job[ReportArgs]) error {
		return baton.RecordOutput(ctx, map[string]any{"month": job.Args.Month, "rows": 1234})
	}), &baton.WorkerOpts{Queue: "reports"})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{
		Workers: workers, Logger: quiet, Queues: []baton.QueueConfig{{Name: "reports"}},
	})
	ctx := context.Background()
	_ = client.Start(ctx)
	res, _ := client.Insert(ctx, ReportArgs{Month: "2026-10"}, nil)
	for {
		row, err := client.JobGet(ctx, "reports", res.Job.ID)
		if err == nil && row.State == baton.JobStateCompleted {
			fmt.Println("output:", string(row.Output))
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = client.Stop(ctx)
	fmt.Println("outside a handler:", errors.Is(baton.RecordOutput(ctx, "x"), baton.ErrNoAttempt))
	// Output:
	// output: {"month":"2026-10","rows":1234}
	// outside a handler: true
}

// A handler steers its job with what it returns.
func ExampleJobSnooze() {
	var calls atomic.Int32
	done := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		switch calls.Add(1) {
		case 1:
			fmt.Println("not ready: snooze (the attempt is not counted)")
			return baton.JobSnooze(10 * time.Millisecond)
		case 2:
			fmt.Println("failed: retry with backoff")
			return errors.New("upstream timeout")
		}
		fmt.Printf("done on attempt %d\n", job.Attempt)
		close(done)
		return nil
	}), &baton.WorkerOpts{Backoff: func(int) time.Duration { return 10 * time.Millisecond }})

	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)
	_, _ = client.Insert(ctx, SyncArgs{UserID: 7}, nil)
	<-done
	_ = client.Stop(ctx)
	// Output:
	// not ready: snooze (the attempt is not counted)
	// failed: retry with backoff
	// done on attempt 2
}

// Seed S3: every 15 minutes, fan out; each tick is inserted once however
// many processes run the schedule.
func ExamplePeriodicJob() {
	every15, err := baton.Every(15 * time.Minute)
	if err != nil {
		panic(err)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		return nil // fan out: insert one job per user here
	}), nil)
	_, err = baton.NewClient(batonmem.New(), &baton.Config{
		Workers: workers,
		PeriodicJobs: []*baton.PeriodicJob{{
			Name:     "fan-out",
			Schedule: every15,
			Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return SyncArgs{}, nil
			},
		}},
	})
	fmt.Println("configured:", err == nil)
	fmt.Println("next tick after 10:07:", every15.Next(time.Date(2026, 11, 22, 10, 7, 0, 0, time.UTC)).Format("15:04"))
	// Output:
	// configured: true
	// next tick after 10:07: 10:15
}

// Many jobs in one round trip per queue and thousand jobs: InsertMany
// checks them all before it stores any, and stores them in order, each
// with its own options.
func ExampleClient_InsertMany() {
	client, err := baton.NewClient(batonmem.New(), &baton.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	batch := []*baton.InsertManyParams{
		{Args: SyncArgs{UserID: 1}},
		{Args: SyncArgs{UserID: 2}, Opts: &baton.InsertOpts{Priority: 5}},
		{Args: SyncArgs{UserID: 3}, Opts: &baton.InsertOpts{Delay: time.Hour}},
	}
	res, err := client.InsertMany(ctx, batch)
	if err != nil {
		panic(err)
	}
	for _, r := range res {
		fmt.Printf("%s, priority %d: %s\n", r.Job.Args, r.Job.Priority, r.Job.State)
	}
	// Output:
	// {"user_id":1}, priority 0: available
	// {"user_id":2}, priority 5: available
	// {"user_id":3}, priority 0: scheduled
}

// A job that used up its attempts waits in the dead set with its errors,
// until an operator (or the baton command, or the dashboard) retries it.
func ExampleClient_JobRetry() {
	var fail atomic.Bool
	fail.Store(true)
	ran := make(chan int, 2)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		defer func() { ran <- job.Attempt }()
		if fail.Load() {
			return errors.New("upstream down")
		}
		return nil
	}), nil)
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)
	defer func() { _ = client.Stop(ctx) }()
	_, _ = client.Insert(ctx, SyncArgs{UserID: 9}, &baton.InsertOpts{MaxAttempts: 1})
	<-ran

	var dead []*baton.JobRow
	for i := 0; len(dead) == 0 && i < 1000; i++ { // the outcome is recorded just after the handler returns
		time.Sleep(time.Millisecond)
		dead, _, _ = client.JobList(ctx, "default", baton.JobStateDead, nil)
	}
	fmt.Printf("dead after %d attempt: %s\n", dead[0].Attempt, dead[0].Errors[0].Error)
	fail.Store(false)
	row, err := client.JobRetry(ctx, "default", dead[0].ID)
	fmt.Println("retried:", row.State, err)
	fmt.Println("ran again, attempt", <-ran)
	// Output:
	// dead after 1 attempt: upstream down
	// retried: available <nil>
	// ran again, attempt 1
}

// errPermanent marks failures that no retry can fix.
var errPermanent = errors.New("permanent failure")

// WorkerMiddleware wraps every attempt the client runs, the first listed
// outermost: for logs, traces and metrics, or to change an outcome. Here
// one logs each attempt, and the other cancels a job whose handler failed
// for good instead of retrying it. A panic in a handler or a middleware is
// the attempt's error.
func ExampleWorkerMiddleware() {
	logAttempt := func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
		fmt.Printf("%s: attempt %d\n", job.Kind, job.Attempt)
		return next(ctx)
	}
	cancelPermanent := func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
		err := next(ctx)
		if errors.Is(err, errPermanent) {
			return baton.JobCancel(err)
		}
		return err
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		return fmt.Errorf("user %d deleted: %w", job.Args.UserID, errPermanent)
	}), nil)
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{
		Workers:          workers,
		WorkerMiddleware: []baton.WorkerMiddleware{logAttempt, cancelPermanent},
		Logger:           quiet,
	})
	ctx := context.Background()
	_ = client.Start(ctx)
	res, _ := client.Insert(ctx, SyncArgs{UserID: 9}, nil)
	row, _ := client.JobGet(ctx, "default", res.Job.ID)
	for row.State != baton.JobStateCancelled {
		time.Sleep(time.Millisecond)
		row, _ = client.JobGet(ctx, "default", res.Job.ID)
	}
	_ = client.Stop(ctx)
	fmt.Println(row.State+":", row.Errors[0].Error)
	// Output:
	// sync_user: attempt 1
	// cancelled: baton: job cancelled: user 9 deleted: permanent failure
}

// A kind's own middleware (WorkerOpts.Middleware) wrap only its jobs,
// inside the client's: here a rate guard that snoozes the report builds
// while the warehouse is busy, without counting the attempt.
func ExampleWorkerOpts_middleware() {
	var busy atomic.Bool
	busy.Store(true)
	whileWarehouseBusy := func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
		if busy.Swap(false) {
			fmt.Println("warehouse busy: snoozed")
			return baton.JobSnooze(10 * time.Millisecond)
		}
		return next(ctx)
	}
	done := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[ReportArgs](func(ctx context.Context, job *baton.Job[ReportArgs]) error {
		fmt.Printf("built %s on attempt %d\n", job.Args.Month, job.Attempt)
		close(done)
		return nil
	}), &baton.WorkerOpts{Middleware: []baton.WorkerMiddleware{whileWarehouseBusy}})

	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)
	_, _ = client.Insert(ctx, ReportArgs{Month: "2026-10"}, nil)
	<-done
	_ = client.Stop(ctx)
	// Output:
	// warehouse busy: snoozed
	// built 2026-10 on attempt 1
}

// InsertMiddleware wraps every Insert and InsertMany call, the first
// listed outermost: one call, whatever the number of jobs, with the jobs
// before they are stored and their results after. Here it reports what
// became of each job.
func ExampleInsertMiddleware() {
	report := func(ctx context.Context, jobs []*baton.InsertManyParams, next func(context.Context) ([]*baton.InsertResult, error)) ([]*baton.InsertResult, error) {
		res, err := next(ctx)
		for i, r := range res {
			fmt.Printf("%s #%d: %s\n", jobs[i].Args.Kind(), i, r.Status)
		}
		return res, err
	}
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{InsertMiddleware: []baton.InsertMiddleware{report}})
	ctx := context.Background()
	unique := &baton.InsertOpts{Unique: &baton.UniqueOpts{}}
	_, err := client.InsertMany(ctx, []*baton.InsertManyParams{
		{Args: SyncArgs{UserID: 1}, Opts: unique},
		{Args: SyncArgs{UserID: 1}, Opts: unique}, // its twin
	})
	fmt.Println("err:", err)
	// Output:
	// sync_user #0: inserted
	// sync_user #1: duplicate
	// err: <nil>
}

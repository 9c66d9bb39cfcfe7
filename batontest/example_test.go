package batontest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batontest"
)

// WelcomeArgs are the arguments of a job that mails a new user.
type WelcomeArgs struct {
	Email string `json:"email"`
}

func (WelcomeArgs) Kind() string { return "welcome_email" }

// SyncArgs are the arguments of a job that syncs one user.
type SyncArgs struct {
	UserID int `json:"user_id"`
}

func (SyncArgs) Kind() string { return "sync_user" }

// signUp is the code under test: it queues a welcome email and, an hour
// later, a first sync.
func signUp(ctx context.Context, client *baton.Client, userID int, email string) error {
	_, err := client.InsertMany(ctx, []*baton.InsertManyParams{
		{Args: WelcomeArgs{Email: email}, Opts: &baton.InsertOpts{Queue: "mail"}},
		{Args: SyncArgs{UserID: userID}, Opts: &baton.InsertOpts{Delay: time.Hour}},
	})
	return err
}

// exampleT stands for the *testing.T a test passes: an Example has none.
// Its Fatalf prints the failure.
func exampleT() testing.TB { return printTB{} }

type printTB struct{ testing.TB }

func (printTB) Helper()                           {}
func (printTB) Fatalf(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// A test asserts what the code under test inserted, whatever backend the
// client runs on.
func ExampleRequireInserted() {
	t := exampleT() // in a test: the test's t
	ctx := context.Background()
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Logger: slog.New(slog.DiscardHandler)})
	if err := signUp(ctx, client, 42, "ada@example.com"); err != nil {
		panic(err)
	}

	welcome := batontest.RequireInserted[WelcomeArgs](ctx, t, client, &batontest.RequireInsertedOpts{Queue: "mail"})
	fmt.Println("welcome email to", welcome.Args.Email, "is", welcome.State)

	sync := batontest.RequireInserted[SyncArgs](ctx, t, client, &batontest.RequireInsertedOpts{
		States:      []baton.JobState{baton.JobStateScheduled},
		RunAt:       time.Now().Add(time.Hour), // inserted with a Delay of an hour
		RunAtWithin: time.Second,
		Match:       batontest.MatchArgs(func(a SyncArgs) bool { return a.UserID == 42 }),
	})
	fmt.Println("sync of user", sync.Args.UserID, "is", sync.State, "in queue", sync.Queue)

	// And in the order they were inserted:
	rows := batontest.RequireManyInserted(ctx, t, client, []batontest.ExpectedJob{
		{Args: WelcomeArgs{}},
		{Args: SyncArgs{}},
	})
	fmt.Println(len(rows), "jobs, first", rows[0].Kind)

	// Output:
	// welcome email to ada@example.com is available
	// sync of user 42 is scheduled in queue default
	// 2 jobs, first welcome_email
}

// WebhookArgs are the arguments of a job that calls a customer's webhook.
type WebhookArgs struct {
	Customer string `json:"customer"`
}

func (WebhookArgs) Kind() string { return "webhook" }

// errDown stands for the customer's endpoint being down.
var errDown = errors.New("503 from the endpoint")

// Work runs a handler in the test, on a job a worker would see, and says
// what a worker made of its return and where that left the job.
func ExampleWork() {
	t := exampleT() // in a test: the test's t
	ctx := context.Background()
	deliver := baton.WorkFunc[WebhookArgs](func(ctx context.Context, job *baton.Job[WebhookArgs]) error {
		if job.Args.Customer == "paused" {
			return baton.JobSnooze(time.Minute)
		}
		if job.Attempt == job.MaxAttempts {
			return baton.JobCancel(errDown) // give up with the reason
		}
		return errDown // retried with backoff
	})
	opts := &batontest.WorkOpts{Worker: &baton.WorkerOpts{
		MaxAttempts: 3,
		Backoff:     func(attempt int) time.Duration { return time.Duration(attempt) * time.Minute },
		Concurrency: &baton.ConcurrencyOpts{
			Key:   baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }),
			Limit: 10,
		},
	}}

	res := batontest.Work(ctx, t, deliver, WebhookArgs{Customer: "acme"}, opts)
	fmt.Printf("attempt %d: %s in %v (%v); key %s, fenced: %v\n", res.Job.Attempt, res.Outcome, res.Delay, res.Err, res.Job.Key, res.Job.Fence > 0)
	fmt.Println("the job is", res.Recorded.State)

	opts.Attempt = 3
	res = batontest.Work(ctx, t, deliver, WebhookArgs{Customer: "acme"}, opts)
	fmt.Printf("attempt %d: %s after %d failed attempts; the job is %s\n", res.Job.Attempt, res.Outcome, len(res.Job.Errors), res.Recorded.State)

	res = batontest.Work(ctx, t, deliver, WebhookArgs{Customer: "paused"}, nil)
	fmt.Printf("paused customer: %s for %v\n", res.Outcome, res.Delay)

	// Output:
	// attempt 1: retry in 1m0s (503 from the endpoint); key customer:acme, fenced: true
	// the job is scheduled
	// attempt 3: cancel after 2 failed attempts; the job is cancelled
	// paused customer: snooze for 1m0s
}

// WorkJob runs a job that the code under test inserted, as it is stored:
// here the welcome email signUp queued, whose handler runs on a copy,
// leaving the client's backend as it was.
func ExampleWorkJob() {
	t := exampleT() // in a test: the test's t
	ctx := context.Background()
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Logger: slog.New(slog.DiscardHandler)})
	if err := signUp(ctx, client, 42, "ada@example.com"); err != nil {
		panic(err)
	}
	welcome := batontest.RequireInserted[WelcomeArgs](ctx, t, client, nil)

	send := baton.WorkFunc[WelcomeArgs](func(ctx context.Context, job *baton.Job[WelcomeArgs]) error {
		fmt.Println("mailing", job.Args.Email, "from queue", job.Queue, "at attempt", job.Attempt)
		return nil
	})
	res := batontest.WorkJob(ctx, t, send, welcome.JobRow, nil)
	fmt.Println("the same job:", res.Job.ID == welcome.ID, "and it", res.Outcome)

	stored, _ := client.JobGet(ctx, welcome.Queue, welcome.ID)
	fmt.Println("in the client's backend it is still", stored.State)

	// Output:
	// mailing ada@example.com from queue mail at attempt 1
	// the same job: true and it completed
	// in the client's backend it is still available
}

// newWorkers stands for the application's own registration, which its
// tests share: the workers, with each kind's settings.
func newWorkers() *baton.Workers {
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[WebhookArgs](func(ctx context.Context, job *baton.Job[WebhookArgs]) error {
		fmt.Println("delivering for", job.Args.Customer, "as", ctx.Value(tenantKey{}))
		return nil
	}), &baton.WorkerOpts{Queue: "hooks", Timeout: 10 * time.Second})
	return workers
}

type tenantKey struct{}

// Given the application's Config, Work runs a job as production would:
// the worker registered for the kind, with the kind's settings, through
// the worker middleware.
func ExampleWork_config() {
	t := exampleT() // in a test: the test's t
	cfg := &baton.Config{
		Workers: newWorkers(),
		WorkerMiddleware: []baton.WorkerMiddleware{
			func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
				return next(context.WithValue(ctx, tenantKey{}, "tenant-7"))
			},
		},
	}

	// nil: the worker cfg.Workers registers for the kind.
	res := batontest.Work(context.Background(), t, nil, WebhookArgs{Customer: "acme"}, &batontest.WorkOpts{Config: cfg})
	fmt.Println(res.Outcome, "in queue", res.Job.Queue)

	// Output:
	// delivering for acme as tenant-7
	// completed in queue hooks
}

package baton_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// A handler that knows no attempt can succeed ends its job with JobCancel:
// no more attempts, and the job goes to the dead set as cancelled, with
// the error recorded.
func ExampleJobCancel() {
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		return baton.JobCancel(errors.New("user deleted"))
	}), nil)
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)

	res, _ := client.Insert(ctx, SyncArgs{UserID: 9}, nil)
	row, _ := client.JobGet(ctx, "default", res.Job.ID)
	for row.State != baton.JobStateCancelled {
		time.Sleep(time.Millisecond)
		row, _ = client.JobGet(ctx, "default", res.Job.ID)
	}
	_ = client.Stop(ctx)
	fmt.Println(row.State, "after attempt", row.Attempt, "of", row.MaxAttempts)
	fmt.Println(row.Errors[0].Error)
	// Output:
	// cancelled after attempt 1 of 25
	// baton: job cancelled: user deleted
}

// OnBusyFail refuses an insert whose key is busy: nothing is stored, and
// the error wraps ErrKeyBusy.
func ExampleConcurrencyOpts_fail() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	opts := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{OnBusy: baton.OnBusyFail}}

	first, _ := client.Insert(ctx, SyncArgs{UserID: 3}, opts)
	fmt.Println("first:", first.Job.State)
	twin, err := client.Insert(ctx, SyncArgs{UserID: 3}, opts)
	fmt.Println("twin:", twin.Status, errors.Is(err, baton.ErrKeyBusy), twin.Job == nil)
	// Output:
	// first: available
	// twin: rejected true true
}

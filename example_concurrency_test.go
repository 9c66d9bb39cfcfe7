package baton_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// WebhookArgs are the arguments of a webhook delivery to one customer.
type WebhookArgs struct {
	Customer string `json:"customer"`
	Event    string `json:"event"`
}

func (WebhookArgs) Kind() string { return "webhook" }

// Seed S11: at most 2 deliveries per customer at once, across every
// process; the rest wait, parked, and run as soon as a slot frees.
func ExampleConcurrencyOpts() {
	var running, most atomic.Int32
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[WebhookArgs](func(ctx context.Context, job *baton.Job[WebhookArgs]) error {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		running.Add(-1)
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		Key:   baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }),
		Limit: 2,
	}})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Concurrency: 10, Logger: quiet})
	ctx := context.Background()
	var jobs []*baton.InsertManyParams
	for i := range 6 {
		jobs = append(jobs, &baton.InsertManyParams{Args: WebhookArgs{Customer: "acme", Event: fmt.Sprint(i)}})
	}
	res, _ := client.InsertMany(ctx, jobs)
	fmt.Println("first two:", res[0].Job.State, res[1].Job.State, "- the rest:", res[2].Job.State)

	_ = client.Start(ctx)
	for {
		if st, _ := client.QueueStats(ctx, "default"); st.Counts[baton.JobStateCompleted] == 6 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_ = client.Stop(ctx)
	fmt.Println("most running at once for acme:", most.Load())
	// Output:
	// first two: available available - the rest: parked
	// most running at once for acme: 2
}

// Seed S1: "drop me if my twin is running" — with limit 1 and OnBusyDrop,
// a second job for the same user ends at once, recorded as dropped.
func ExampleOnBusyDrop() {
	release := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		<-release
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{OnBusy: baton.OnBusyDrop}})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)

	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	for row, _ := client.JobGet(ctx, "default", first.Job.ID); row.State != baton.JobStateRunning; row, _ = client.JobGet(ctx, "default", first.Job.ID) {
		time.Sleep(time.Millisecond)
	}
	twin, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	other, _ := client.Insert(ctx, SyncArgs{UserID: 2}, nil)
	fmt.Println("user 1 again:", twin.Job.State, "-", twin.Job.Errors[0].Error)
	fmt.Println("user 2:", other.Job.State)
	close(release)
	_ = client.Stop(ctx)
	// Output:
	// user 1 again: dropped - key "sync_user:{\"user_id\":1}" busy: 1 holding, limit 1
	// user 2: available
}

// Seed S2: a handler with more to do asks to run again; the follow-up is
// queued in the same step that frees its slot, so no twin slips in.
func ExampleJobAgain() {
	var left atomic.Int32
	left.Store(3)
	done := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		fmt.Printf("run %d: processing a batch of events\n", job.Runs)
		if left.Add(-1) > 0 {
			return baton.JobAgain()
		}
		close(done)
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{OnBusy: baton.OnBusyDrop}})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)
	_, _ = client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	<-done
	_ = client.Stop(ctx)
	// Output:
	// run 0: processing a batch of events
	// run 1: processing a batch of events
	// run 2: processing a batch of events
}

// Seed S14: the limit lives in the backend; 0 halts a key, and raising it
// lets parked jobs run at once.
func ExampleClient_SetLimit() {
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	ctx := context.Background()
	byCustomer := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }), Limit: 10,
	}}
	_, _ = client.SetLimit(ctx, "default", "customer:acme", 0)
	for range 3 {
		_, _ = client.Insert(ctx, WebhookArgs{Customer: "acme"}, byCustomer)
	}
	info, _ := client.KeyGet(ctx, "default", "customer:acme")
	fmt.Printf("halted: limit %d, %d holding, %d parked\n", info.Limit, info.Holding, info.Parked)
	info, _ = client.SetLimit(ctx, "default", "customer:acme", 2)
	fmt.Printf("raised: limit %d, %d holding, %d parked\n", info.Limit, info.Holding, info.Parked)
	info, _ = client.ResetLimit(ctx, "default", "customer:acme")
	fmt.Printf("reset: limit %d (the kind's default), %d holding, %d parked\n", info.Limit, info.Holding, info.Parked)
	// Output:
	// halted: limit 0, 0 holding, 3 parked
	// raised: limit 2, 2 holding, 1 parked
	// reset: limit 10 (the kind's default), 3 holding, 0 parked
}

// Uniqueness: a second insert of the same job resolves to the first.
func ExampleUniqueOpts() {
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	ctx := context.Background()
	opts := &baton.InsertOpts{Unique: &baton.UniqueOpts{Scope: baton.UniqueUntilDone}}
	a, _ := client.Insert(ctx, SyncArgs{UserID: 9}, opts)
	b, _ := client.Insert(ctx, SyncArgs{UserID: 9}, opts)
	fmt.Println(a.Status, b.Status, a.Job.ID == b.Job.ID)
	// Output:
	// inserted duplicate true
}

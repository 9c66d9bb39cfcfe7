package baton_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// KeyList lists a queue's active concurrency keys (those with holders,
// parked jobs or a stored limit), most parked first, from an index kept
// by the transitions themselves: no scan. An idle key keeps no state and
// is not listed.
func ExampleClient_KeyList() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	byCustomer := &baton.InsertOpts{Queue: "webhooks", Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }), Limit: 2,
	}}
	for _, customer := range []string{"acme", "acme", "acme", "acme", "globex"} {
		_, _ = client.Insert(ctx, WebhookArgs{Customer: customer}, byCustomer)
	}
	_, _ = client.SetLimit(ctx, "webhooks", "customer:initech", 0) // halted, no job yet

	keys, total, err := client.KeyList(ctx, "webhooks", nil)
	if err != nil {
		panic(err)
	}
	for _, k := range keys {
		fmt.Printf("%s: limit %d (override %v), %d holding, %d parked\n", k.Key, k.Limit, k.Override, k.Holding, k.Parked)
	}
	fmt.Println("active keys:", total)
	// Output:
	// customer:acme: limit 2 (override false), 2 holding, 2 parked
	// customer:globex: limit 2 (override false), 1 holding, 0 parked
	// customer:initech: limit 0 (override true), 0 holding, 0 parked
	// active keys: 3
}

// KeyGet reads one concurrency key with the jobs holding its slots. A key
// with no holders, parked jobs or stored limit keeps no state: KeyGet
// answers ErrKeyNotFound.
func ExampleClient_KeyGet() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	byCustomer := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }),
	}}
	first, _ := client.Insert(ctx, WebhookArgs{Customer: "acme", Event: "created"}, byCustomer)
	_, _ = client.Insert(ctx, WebhookArgs{Customer: "acme", Event: "updated"}, byCustomer)

	info, err := client.KeyGet(ctx, "default", "customer:acme")
	if err != nil {
		panic(err)
	}
	fmt.Printf("limit %d, %d holding, %d parked, waiting since the insert: %v\n",
		info.Limit, info.Holding, info.Parked, !info.OldestParked.IsZero())
	for _, h := range info.Holders {
		fmt.Println("holder:", h.State, "- the first job:", h.ID == first.Job.ID)
	}
	_, err = client.KeyGet(ctx, "default", "customer:globex")
	fmt.Println("an idle key:", errors.Is(err, baton.ErrKeyNotFound))
	// Output:
	// limit 1, 1 holding, 1 parked, waiting since the insert: true
	// holder: available - the first job: true
	// an idle key: true
}

// JobList with a Key lists the jobs parked for one concurrency key, in the
// order they will run as its slots free: a customer's backlog, read from
// the key's own parked queue however many other keys have jobs waiting.
func ExampleClient_JobList_key() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	byCustomer := &baton.InsertOpts{Queue: "webhooks", Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }),
	}}
	for _, event := range []string{"created", "updated", "paid", "shipped"} {
		_, _ = client.Insert(ctx, WebhookArgs{Customer: "acme", Event: event}, byCustomer)
		_, _ = client.Insert(ctx, WebhookArgs{Customer: "globex", Event: event}, byCustomer)
	}

	waiting, total, err := client.JobList(ctx, "webhooks", baton.JobStateParked, &baton.JobListOpts{Key: "customer:acme"})
	if err != nil {
		panic(err)
	}
	fmt.Printf("customer:acme has %d parked; next to run:\n", total)
	for _, row := range waiting {
		var args WebhookArgs
		_ = json.Unmarshal(row.Args, &args)
		fmt.Println("-", args.Event)
	}
	// Output:
	// customer:acme has 3 parked; next to run:
	// - updated
	// - paid
	// - shipped
}

// QueuePause stops every process from fetching a queue's jobs: inserts go
// on and running jobs finish, but nothing starts until QueueResume.
func ExampleClient_QueuePause() {
	ran := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		close(ran)
		return nil
	}), nil)
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)
	defer func() { _ = client.Stop(ctx) }()

	_ = client.QueuePause(ctx, "default")
	res, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	time.Sleep(50 * time.Millisecond) // time enough to run, were the queue not paused
	row, _ := client.JobGet(ctx, "default", res.Job.ID)
	stats, _ := client.QueueStats(ctx, "default")
	fmt.Println("paused:", stats.Paused, "- job:", row.State)

	_ = client.QueueResume(ctx, "default")
	<-ran
	fmt.Println("resumed: the job ran")
	// Output:
	// paused: true - job: available
	// resumed: the job ran
}

// JobDelete removes a job that is not running. A job holding a slot of
// its concurrency key frees it, and the key's next parked job is promoted
// in the same step.
func ExampleClient_JobDelete() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	opts := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{}} // a key per user, limit 1
	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	second, _ := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	fmt.Println("before:", first.Job.State, second.Job.State)

	if err := client.JobDelete(ctx, "default", first.Job.ID); err != nil {
		panic(err)
	}
	_, err := client.JobGet(ctx, "default", first.Job.ID)
	fmt.Println("deleted:", errors.Is(err, baton.ErrJobNotFound))
	row, _ := client.JobGet(ctx, "default", second.Job.ID)
	fmt.Println("the parked one:", row.State)
	// Output:
	// before: available parked
	// deleted: true
	// the parked one: available
}

// JobCancel stops a job from the admin API. A queued job is cancelled at
// once. A running one is asked to stop: its worker cancels the handler's
// context at its next heartbeat, with the cause ErrJobCancelled, and the
// job ends cancelled, not retried, whatever the handler returns but nil.
func ExampleClient_JobCancel() {
	stopped := make(chan error, 1)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		<-ctx.Done() // a long sync, until cancelled
		stopped <- context.Cause(ctx)
		return ctx.Err()
	}), nil)
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet,
		LeaseTTL: time.Second, HeartbeatInterval: 10 * time.Millisecond})
	ctx := context.Background()
	later, _ := client.Insert(ctx, SyncArgs{UserID: 1}, &baton.InsertOpts{Delay: time.Hour})
	row, _ := client.JobCancel(ctx, "default", later.Job.ID)
	fmt.Println("scheduled job:", row.State, "-", row.Errors[0].Error)

	_ = client.Start(ctx)
	defer func() { _ = client.Stop(ctx) }()
	res, _ := client.Insert(ctx, SyncArgs{UserID: 2}, nil)
	for row.ID != res.Job.ID || row.State != baton.JobStateRunning {
		time.Sleep(time.Millisecond)
		row, _ = client.JobGet(ctx, "default", res.Job.ID)
	}
	row, _ = client.JobCancel(ctx, "default", res.Job.ID)
	fmt.Println("running job:", row.State, "- cancel requested:", !row.CancelRequestedAt.IsZero())
	fmt.Println("the handler's cause:", errors.Is(<-stopped, baton.ErrJobCancelled))
	for row.State == baton.JobStateRunning {
		time.Sleep(time.Millisecond)
		row, _ = client.JobGet(ctx, "default", res.Job.ID)
	}
	fmt.Println("then:", row.State, "after", row.Attempt, "attempt -", row.Errors[0].Error)
	// Output:
	// scheduled job: cancelled - cancelled by the admin API
	// running job: running - cancel requested: true
	// the handler's cause: true
	// then: cancelled after 1 attempt - cancelled by the admin API
}

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
func ExampleConcurrencyOpts_drop() {
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

// OnBusyReschedule: a job whose key is busy when it is inserted is
// scheduled BusyDelay later instead of waiting in line, its attempt not
// counted, and tried again then (again rescheduled if the key is still
// busy).
func ExampleConcurrencyOpts_reschedule() {
	var calls atomic.Int32
	release := make(chan struct{})
	ran := make(chan *baton.Job[SyncArgs], 2)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		if calls.Add(1) == 1 {
			<-release // the first job holds the key until released
		}
		ran <- job
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		OnBusy:    baton.OnBusyReschedule,
		BusyDelay: func(baton.JobArgs) time.Duration { return 20 * time.Millisecond },
	}})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)

	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	for row, _ := client.JobGet(ctx, "default", first.Job.ID); row.State != baton.JobStateRunning; row, _ = client.JobGet(ctx, "default", first.Job.ID) {
		time.Sleep(time.Millisecond)
	}
	twin, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	fmt.Println("twin while the first runs:", twin.Job.State, "- attempts:", twin.Job.Attempt)
	close(release)
	fmt.Println("first ran:", (<-ran).ID == first.Job.ID)
	job := <-ran
	fmt.Println("then the twin ran:", job.ID == twin.Job.ID, "- attempt", job.Attempt)
	_ = client.Stop(ctx)
	// Output:
	// twin while the first runs: scheduled - attempts: 0
	// first ran: true
	// then the twin ran: true - attempt 1
}

// JobAgainIn ends a run successfully and schedules the job's next run,
// in the same atomic step that frees its key's slot: the job cannot be
// lost between its runs, and its key is free meanwhile.
func ExampleJobAgainIn() {
	done := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		fmt.Printf("run %d, attempt %d\n", job.Runs, job.Attempt)
		if job.Runs == 0 {
			return baton.JobAgainIn(time.Hour) // sync this user again in an hour
		}
		close(done)
		return nil
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{}}) // a key per user, limit 1
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)

	res, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	row, _ := client.JobGet(ctx, "default", res.Job.ID)
	for row.State != baton.JobStateScheduled {
		time.Sleep(time.Millisecond)
		row, _ = client.JobGet(ctx, "default", res.Job.ID)
	}
	_, err := client.KeyGet(ctx, "default", row.Key)
	fmt.Println("between the runs:", row.State, "- key free:", errors.Is(err, baton.ErrKeyNotFound))

	_, _ = client.JobRetry(ctx, "default", row.ID) // an operator runs it now rather than in an hour
	<-done
	_ = client.Stop(ctx)
	// Output:
	// run 0, attempt 1
	// between the runs: scheduled - key free: true
	// run 1, attempt 1
}

// fencedStore stands for a system jobs write to (a database row, a file,
// a remote API): it refuses a write whose fencing token is lower than the
// highest it has seen.
type fencedStore struct {
	mu      sync.Mutex
	highest int64
	value   string
}

var errStaleFence = errors.New("stale fence: refused")

func (s *fencedStore) Write(fence int64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return errStaleFence
	}
	s.highest, s.value = fence, value
	return nil
}

// Job.Fence is the fencing token of a keyed job's lease, strictly
// increasing across the leases of its key. A lease cannot stop a holder
// that stalled past it (a GC pause, a partition) from writing when it
// wakes, while the next job of the key runs; passing the fence with every
// write lets the store refuse the stale one.
func ExampleJob_fence() {
	store := &fencedStore{}
	fences := make(chan int64, 2)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[WebhookArgs](func(ctx context.Context, job *baton.Job[WebhookArgs]) error {
		fences <- job.Fence
		return store.Write(job.Fence, job.Args.Event)
	}), &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a WebhookArgs) string { return "customer:" + a.Customer }),
	}})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)
	_, _ = client.InsertMany(ctx, []*baton.InsertManyParams{
		{Args: WebhookArgs{Customer: "acme", Event: "created"}},
		{Args: WebhookArgs{Customer: "acme", Event: "updated"}},
	})
	first, second := <-fences, <-fences
	_ = client.Stop(ctx)
	fmt.Println("fence increased:", second > first)

	// The first job's holder wakes from a stall and writes what it had.
	fmt.Println("late write:", store.Write(first, "created"))
	fmt.Println("value:", store.value)
	// Output:
	// fence increased: true
	// late write: stale fence: refused
	// value: updated
}

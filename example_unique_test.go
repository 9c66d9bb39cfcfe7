package baton_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// UniqueQueued: at most one of a job waits to run. Once it runs, a twin
// can be queued again (for what changed while it ran), and later inserts
// resolve to that twin.
func ExampleUniqueOpts_queued() {
	release := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		<-release
		return nil
	}), &baton.WorkerOpts{Unique: &baton.UniqueOpts{Scope: baton.UniqueQueued}})
	// One worker, so that a job queued while the first runs stays queued.
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Concurrency: 1, Logger: quiet})
	ctx := context.Background()

	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	dup, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	fmt.Println("while queued:", first.Status, "then", dup.Status, "of it:", dup.Job.ID == first.Job.ID)

	_ = client.Start(ctx)
	for row, _ := client.JobGet(ctx, "default", first.Job.ID); row.State != baton.JobStateRunning; row, _ = client.JobGet(ctx, "default", first.Job.ID) {
		time.Sleep(time.Millisecond)
	}
	next, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	dup, _ = client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	fmt.Println("while it runs:", next.Status, "then", dup.Status, "of the new one:", dup.Job.ID == next.Job.ID)
	close(release)
	_ = client.Stop(ctx)
	// Output:
	// while queued: inserted then duplicate of it: true
	// while it runs: inserted then duplicate of the new one: true
}

// UniqueRunning: an insert made while its twin runs resolves to the
// running job. Queued twins do not conflict with one another; to keep
// twins from running at once, give them a concurrency key of limit 1.
func ExampleUniqueOpts_running() {
	release := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		<-release
		return nil
	}), &baton.WorkerOpts{Unique: &baton.UniqueOpts{Scope: baton.UniqueRunning}})
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{Workers: workers, Logger: quiet})
	ctx := context.Background()
	_ = client.Start(ctx)

	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	state := func() baton.JobState {
		row, _ := client.JobGet(ctx, "default", first.Job.ID)
		return row.State
	}
	for state() != baton.JobStateRunning {
		time.Sleep(time.Millisecond)
	}
	dup, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	fmt.Println("while it runs:", dup.Status, "of it:", dup.Job.ID == first.Job.ID)

	close(release)
	for state() != baton.JobStateCompleted {
		time.Sleep(time.Millisecond)
	}
	again, _ := client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	fmt.Println("once it is done:", again.Status)
	_ = client.Stop(ctx)
	// Output:
	// while it runs: duplicate of it: true
	// once it is done: inserted
}

// UniquePeriod throttles: one job per Period, whatever became of the
// first since (completed, dead or deleted). An insert that conflicts
// claims nothing, so it does not move the window.
func ExampleUniqueOpts_period() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	opts := &baton.InsertOpts{Unique: &baton.UniqueOpts{Scope: baton.UniquePeriod, Period: 50 * time.Millisecond}}

	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	fmt.Println("first:", first.Status)
	_ = client.JobDelete(ctx, "default", first.Job.ID)
	dup, _ := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	fmt.Println("after it was deleted:", dup.Status, "of it:", dup.Job.ID == first.Job.ID)

	time.Sleep(50 * time.Millisecond) // the period ends
	next, _ := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	fmt.Println("a period later:", next.Status)
	// Output:
	// first: inserted
	// after it was deleted: duplicate of it: true
	// a period later: inserted
}

// ReindexArgs ask for one document to be reindexed at a revision.
type ReindexArgs struct {
	Doc      string `json:"doc"`
	Revision int    `json:"revision"`
}

func (ReindexArgs) Kind() string { return "reindex" }

// UniqueReplace as a debounce: each edit of a document inserts a reindex
// to run a minute later, unique per document while queued. An edit while
// one waits gives it the new args and pushes its run time back, so a
// burst of edits makes one reindex, of the last revision, a minute after
// the last edit.
func ExampleUniqueOpts_replace() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	debounce := &baton.InsertOpts{Delay: time.Minute, Unique: &baton.UniqueOpts{
		Key:        baton.KeyOf(func(a ReindexArgs) string { return "doc:" + a.Doc }),
		Scope:      baton.UniqueQueued,
		OnConflict: baton.UniqueReplace,
	}}

	first, _ := client.Insert(ctx, ReindexArgs{Doc: "readme", Revision: 1}, debounce)
	var last *baton.InsertResult
	for rev := 2; rev <= 3; rev++ {
		last, _ = client.Insert(ctx, ReindexArgs{Doc: "readme", Revision: rev}, debounce)
		fmt.Println("edit", rev, "->", last.Status, "the first job:", last.Job.ID == first.Job.ID)
	}
	fmt.Println("args:", string(last.Job.Args))
	fmt.Println("run time pushed back:", last.Job.RunAt.After(first.Job.RunAt))
	_, total, _ := client.JobList(ctx, "default", baton.JobStateScheduled, nil)
	fmt.Println("scheduled jobs:", total)
	// Output:
	// edit 2 -> replaced the first job: true
	// edit 3 -> replaced the first job: true
	// args: {"doc":"readme","revision":3}
	// run time pushed back: true
	// scheduled jobs: 1
}

// UniqueReject refuses a twin: the insert fails with ErrDuplicate,
// nothing is stored, and the result names the twin.
func ExampleUniqueOpts_reject() {
	client, _ := baton.NewClient(batonmem.New(), nil) // insert-only
	ctx := context.Background()
	opts := &baton.InsertOpts{Unique: &baton.UniqueOpts{OnConflict: baton.UniqueReject}} // until done

	first, _ := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	twin, err := client.Insert(ctx, SyncArgs{UserID: 1}, opts)
	fmt.Println("twin:", twin.Status, errors.Is(err, baton.ErrDuplicate), "- names the first:", twin.Job.ID == first.Job.ID)
	_, total, _ := client.JobList(ctx, "default", baton.JobStateAvailable, nil)
	fmt.Println("available jobs:", total)
	// Output:
	// twin: rejected true - names the first: true
	// available jobs: 1
}

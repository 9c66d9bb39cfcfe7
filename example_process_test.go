package baton_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// ProcessList shows the worker processes working the backend, on every
// machine: each started client records itself just after Start, renews
// its record every ProcessTTL/3 with its busy workers, and removes it when
// Stop returns. A process that crashed drops out ProcessTTL after its
// last beat.
func ExampleClient_ProcessList() {
	driver := batonmem.New()
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		return nil
	}), nil)
	worker, _ := baton.NewClient(driver, &baton.Config{
		Workers: workers, ProcessName: "billing", Concurrency: 20,
		Queues: []baton.QueueConfig{{Name: "critical", Weight: 6}, {Name: "default", Weight: 3}, {Name: "low", MaxWorkers: 2}},
	})
	ctx := context.Background()
	_ = worker.Start(ctx)

	admin, _ := baton.NewClient(driver, nil) // any client lists them, started or not
	list, err := admin.ProcessList(ctx)
	for err == nil && len(list) == 0 { // the first beat is on its way
		time.Sleep(time.Millisecond)
		list, err = admin.ProcessList(ctx)
	}
	if err != nil {
		panic(err)
	}
	for _, p := range list {
		var queues []string
		for _, q := range p.Queues {
			if q.MaxWorkers > 0 {
				queues = append(queues, fmt.Sprintf("%s (weight %d, at most %d workers)", q.Name, q.Weight, q.MaxWorkers))
			} else {
				queues = append(queues, fmt.Sprintf("%s (weight %d)", q.Name, q.Weight))
			}
		}
		fmt.Printf("%s: %d of %d workers busy, stopping %v\n", p.Name, p.Busy, p.Concurrency, p.Stopping)
		fmt.Println("  queues:", strings.Join(queues, ", "))
	}
	_ = worker.Stop(ctx)
	list, _ = admin.ProcessList(ctx)
	fmt.Println("after Stop:", len(list))
	// Output:
	// billing: 0 of 20 workers busy, stopping false
	//   queues: critical (weight 6), default (weight 3), low (weight 1, at most 2 workers)
	// after Stop: 0
}

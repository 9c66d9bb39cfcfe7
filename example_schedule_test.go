package baton_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// A started client registers its periodic jobs in the backend: any client
// of the backend (the CLI's `baton schedules`, the dashboard) lists them
// with their queue, kind, spec, last and next tick.
func ExampleClient_ScheduleList() {
	ctx := context.Background()
	every, err := baton.Every(20 * time.Millisecond)
	if err != nil {
		panic(err)
	}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		return nil
	}), nil)
	c, err := baton.NewClient(batonmem.New(), &baton.Config{
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "fan-out", Schedule: every,
			Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return SyncArgs{}, &baton.InsertOpts{Queue: "sync"}
			},
		}},
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = c.Stop(ctx) }()

	// The schedule is registered at its first tick.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := c.ScheduleList(ctx)
		if err != nil {
			panic(err)
		}
		if len(list) == 1 && !list[0].LastTick.IsZero() {
			s := list[0]
			fmt.Println(s.Name, s.Queue, s.Kind, s.Spec)
			fmt.Println("next tick after the last:", s.NextTick.After(s.LastTick))
			break
		}
	}
	// Output:
	// fan-out sync sync_user every 20ms
	// next tick after the last: true
}

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

// Cron parses a five-field cron spec (UTC unless it starts with
// CRON_TZ=Zone) for a PeriodicJob; each tick is inserted once however many
// processes run the schedule. A spec that can never fire is refused, with
// the reason.
//
// The schedule is registered in the backend, with its spec, at its first
// tick (ExampleClient_ScheduleList shows a listed one): until then
// ScheduleList, `baton schedules` and the dashboard do not list it.
func ExampleCron() {
	nightly, err := baton.Cron("30 2 * * *") // 02:30 UTC, every day
	if err != nil {
		panic(err)
	}
	fmt.Println("spec:", nightly)
	noon := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	fmt.Println("next after noon:", nightly.Next(noon).Format(time.DateTime))

	_, err = baton.Cron("0 0 30 2 *")
	fmt.Println(err)

	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncArgs](func(ctx context.Context, job *baton.Job[SyncArgs]) error {
		return nil // the nightly sync
	}), nil)
	client, err := baton.NewClient(batonmem.New(), &baton.Config{
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "nightly-sync", Schedule: nightly,
			Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) { return SyncArgs{}, nil },
		}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_ = client.Start(ctx)
	defer func() { _ = client.Stop(ctx) }()
	list, _ := client.ScheduleList(ctx)
	fmt.Println("listed before its first tick:", len(list))
	// Output:
	// spec: 30 2 * * *
	// next after noon: 2026-11-23 02:30:00
	// baton: cron spec "0 0 30 2 *" matches no date in the next five years
	// listed before its first tick: 0
}

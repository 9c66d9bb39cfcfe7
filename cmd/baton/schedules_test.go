package main

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

func testSchedules(t *testing.T, bin string) {
	f := setup(t, bin)
	ctx := context.Background()
	r := f.run("schedules")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "no schedules registered")
	r = f.run("schedules", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.JSONEq(t, `{"schedules": []}`, r.stdout)

	// A started client registers its schedule at its first tick.
	every, err := baton.Every(50 * time.Millisecond)
	require.NoError(t, err)
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[email](func(context.Context, *baton.Job[email]) error { return nil }), nil)
	c, err := baton.NewClient(f.driver, &baton.Config{
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
		PeriodicJobs: []*baton.PeriodicJob{{
			Name: "digest", Schedule: every,
			Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
				return email{To: "all@x"}, &baton.InsertOpts{Queue: "mail"}
			},
		}},
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool {
		list, err := f.client.ScheduleList(ctx)
		return err == nil && len(list) == 1 && !list[0].LastTick.IsZero()
	}, 10*time.Second, 20*time.Millisecond)
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))

	// Two more, as other processes would have registered them: a cron
	// schedule that has not fired yet, and one of an application's own.
	for _, p := range []batondriver.QueueScheduleParams{
		{Queue: "default", Name: "nightly", Spec: "0 3 * * *", Kind: "report", TTL: time.Hour},
		{Queue: "default", Name: "launch", Spec: "on launch day", Kind: "report", TTL: time.Hour},
	} {
		require.NoError(t, f.driver.QueueScheduleRegister(ctx, &p))
	}
	_, err = f.client.Insert(ctx, email{To: "x@x"}, nil) // queue default now has had a job
	require.NoError(t, err)

	var out struct {
		Schedules []scheduleOut `json:"schedules"`
	}
	f.runJSON(&out, "schedules")
	require.Len(t, out.Schedules, 3)
	digest, launch, nightly := out.Schedules[0], out.Schedules[1], out.Schedules[2]
	require.Equal(t, "digest", digest.Name)
	require.Equal(t, "mail", digest.Queue)
	require.Equal(t, "email", digest.Kind)
	require.Equal(t, "every 50ms", digest.Spec)
	require.NotNil(t, digest.LastTick)
	require.NotNil(t, digest.NextTick)
	require.WithinDuration(t, time.Now(), digest.SeenAt, 10*time.Second)
	require.WithinDuration(t, digest.SeenAt.Add(7*24*time.Hour), digest.ExpiresAt, time.Second)

	require.Equal(t, "launch", launch.Name)
	require.Nil(t, launch.LastTick)
	require.Nil(t, launch.NextTick, "a spec baton cannot read")

	require.Equal(t, "nightly", nightly.Name)
	require.Equal(t, "default", nightly.Queue)
	require.Nil(t, nightly.LastTick)
	cron, err := baton.Cron("0 3 * * *")
	require.NoError(t, err)
	require.NotNil(t, nightly.NextTick)
	require.WithinDuration(t, cron.Next(time.Now()), *nightly.NextTick, time.Second)

	r = f.run("schedules")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4)
	require.Equal(t, []string{"NAME", "QUEUE", "KIND", "SPEC", "LAST", "TICK", "NEXT", "TICK", "SEEN"}, strings.Fields(lines[0]))
	require.Regexp(t, `^digest\s+mail\s+email\s+every 50ms\s+\d+(ms|s|m) ago\s+in \d+ms\s+\d+(ms|s|m) ago$`, lines[1])
	require.Regexp(t, `^launch\s+default\s+report\s+on launch day\s+-\s+-\s+\d+(ms|s|m) ago$`, lines[2])
	require.Regexp(t, `^nightly\s+default\s+report\s+`+regexp.QuoteMeta("0 3 * * *")+`\s+-\s+in \d+[smhd]\s+\d+(ms|s|m) ago$`, lines[3]) // seconds in the last minute before 03:00

	f.runJSON(&out, "schedules", "-q", "default")
	require.Len(t, out.Schedules, 2)
	r = f.run("schedules", "-q", "nosuch")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, `queue "nosuch" not found`)
}

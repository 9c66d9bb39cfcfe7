package main

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

func testProcesses(t *testing.T, bin string) {
	f := setup(t, bin)
	ctx := context.Background()
	r := f.run("processes")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no live processes: started clients list themselves here while they run\n", r.stdout)
	r = f.run("processes", "--json")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.JSONEq(t, `{"processes": []}`, r.stdout)

	// A client started here, and one of another machine, as its beat
	// recorded it: stopping, in strict priority order.
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[email](func(context.Context, *baton.Job[email]) error { return nil }), nil)
	c, err := baton.NewClient(f.driver, &baton.Config{
		Workers: workers, Logger: slog.New(slog.DiscardHandler), ProcessName: "billing", Concurrency: 20,
		Queues: []baton.QueueConfig{{Name: "critical", Weight: 6, MaxWorkers: 4}, {Name: "mail:low"}},
	})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	_, err = f.driver.ProcessBeat(ctx, &batondriver.ProcessBeatParams{ProcessRecord: batondriver.ProcessRecord{
		ID: "0123456789abcdef", Host: "zz-web-2", PID: 77, Version: "v9.9.9",
		Queues: []batondriver.ProcessQueue{{Name: "mail", Weight: 1, MaxWorkers: 2}, {Name: "default", Weight: 1}}, StrictPriority: true,
		Concurrency: 5, Busy: 3, Stopping: true,
	}, TTL: time.Hour})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := f.client.ProcessList(ctx)
		return err == nil && len(list) == 2
	}, 10*time.Second, 10*time.Millisecond)

	var out struct {
		Processes []processOut `json:"processes"`
	}
	f.runJSON(&out, "processes")
	require.Len(t, out.Processes, 2)
	here, there := out.Processes[0], out.Processes[1]
	hereFirst := here.Host != "zz-web-2" // sorted by host
	if !hereFirst {
		here, there = there, here
	}
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, host, here.Host)
	require.Equal(t, os.Getpid(), here.PID)
	require.Equal(t, "billing", here.Name)
	require.Equal(t, []processQueueOut{{"critical", 6, 4}, {"mail:low", 1, 0}}, here.Queues)
	require.False(t, here.StrictPriority)
	require.Equal(t, 20, here.Concurrency)
	require.Zero(t, here.Busy)
	require.False(t, here.Stopping)
	require.Len(t, here.ID, 16)
	require.WithinDuration(t, time.Now(), here.StartedAt, 10*time.Second)
	require.WithinDuration(t, here.SeenAt.Add(30*time.Second), here.ExpiresAt, time.Millisecond)
	require.Equal(t, processOut{
		ID: "0123456789abcdef", Name: "", Host: "zz-web-2", PID: 77, Version: "v9.9.9",
		Queues: []processQueueOut{{"mail", 1, 2}, {"default", 1, 0}}, StrictPriority: true,
		Concurrency: 5, Busy: 3, Stopping: true,
		StartedAt: there.StartedAt, SeenAt: there.SeenAt, ExpiresAt: there.SeenAt.Add(time.Hour),
	}, there)

	r = f.run("processes")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4)
	require.Equal(t, []string{"HOST", "PID", "NAME", "STATE", "BUSY", "QUEUES", "STARTED", "SEEN", "VERSION", "ID"}, strings.Fields(lines[0]))
	hereLine, thereLine := lines[1], lines[2]
	if !hereFirst {
		hereLine, thereLine = thereLine, hereLine
	}
	require.Regexp(t, `^`+regexp.QuoteMeta(host)+`\s+\d+\s+billing\s+running\s+0/20\s+critical=6,max=4 mail:low=1\s+\d+(ms|s) ago\s+\d+(ms|s) ago\s+\S+\s+[0-9a-f]{16}$`, hereLine)
	require.Regexp(t, `^zz-web-2\s+77\s+-\s+stopping\s+3/5\s+mail,max=2 > default\s+\d+(ms|s) ago\s+\d+(ms|s) ago\s+v9\.9\.9\s+0123456789abcdef$`, thereLine)
	require.Equal(t, "(2 processes, 3 of 25 workers busy)", lines[3])

	// -q: the processes that work one queue.
	f.runJSON(&out, "processes", "-q", "mail")
	require.Len(t, out.Processes, 1)
	require.Equal(t, "zz-web-2", out.Processes[0].Host)
	r = f.run("processes", "-q", "critical")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "billing")
	require.NotContains(t, r.stdout, "zz-web-2")
	require.Contains(t, r.stdout, "(1 process working critical, 0 of 20 workers busy)")
	r = f.run("processes", "--queue", "nobody")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no live process works nobody: started clients list themselves here while they run\n", r.stdout)

	// Stopped, the client is gone at once.
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, c.Stop(stopCtx))
	f.runJSON(&out, "processes")
	require.Len(t, out.Processes, 1)
	require.Equal(t, "zz-web-2", out.Processes[0].Host)
	r = f.run("processes")
	require.Contains(t, r.stdout, "(1 process, 3 of 5 workers busy)")

	// On a Cluster too.
	addrs := redistest.SharedCluster(t).Addrs()
	cf := newFixture(t, bin, "redis://"+strings.Join(addrs, ","), addrs...)
	_, err = cf.driver.ProcessBeat(ctx, &batondriver.ProcessBeatParams{ProcessRecord: batondriver.ProcessRecord{
		ID: "p", Host: "h", Queues: []batondriver.ProcessQueue{{Name: "default", Weight: 1}}, Concurrency: 1,
	}, TTL: time.Hour})
	require.NoError(t, err)
	cf.runJSON(&out, "processes")
	require.Len(t, out.Processes, 1)
	require.Equal(t, "p", out.Processes[0].ID)

	r = f.run("processes", "extra")
	require.Equal(t, exitUsage, r.code)
}

package baton_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/redistest"
)

func TestScheduleSpecs(t *testing.T) {
	t.Parallel()
	_, err := baton.Cron("61 * * * *")
	require.ErrorContains(t, err, `baton: cron spec "61 * * * *"`)
	_, err = baton.Every(time.Millisecond)
	require.ErrorContains(t, err, "at least 10ms")

	every, err := baton.Every(15 * time.Minute)
	require.NoError(t, err)
	at := time.Date(2026, 11, 22, 10, 7, 30, 0, time.UTC)
	require.Equal(t, time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC), every.Next(at))
	require.Equal(t, time.Date(2026, 11, 22, 10, 30, 0, 0, time.UTC), every.Next(every.Next(at)))

	cron, err := baton.Cron("0,15,30,45 * * * *")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 22, 10, 15, 0, 0, time.UTC), cron.Next(at))

	job := func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return emailArgs{}, nil }
	for _, tc := range []struct {
		jobs []*baton.PeriodicJob
		want string
	}{
		{[]*baton.PeriodicJob{nil}, "PeriodicJobs[0] is nil"},
		{[]*baton.PeriodicJob{{Schedule: every, Job: job}}, "name"},
		{[]*baton.PeriodicJob{{Name: "a", Job: job}}, `"a" has no Schedule`},
		{[]*baton.PeriodicJob{{Name: "a", Schedule: every}}, `"a" has no Job`},
		{[]*baton.PeriodicJob{{Name: "a", Schedule: every, Job: job}, {Name: "a", Schedule: every, Job: job}}, `"a" used twice`},
	} {
		_, err := baton.NewClient(batonmemDriver(), &baton.Config{PeriodicJobs: tc.jobs})
		require.ErrorContains(t, err, tc.want)
	}
}

// Three processes (each with its own Redis connection and client) run the
// same schedule; every tick is inserted, and run, exactly once.
func TestPeriodicJobFiresOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	addr := redistest.SharedServer(t).Addr()
	prefix := fmt.Sprintf("cron%d", time.Now().UnixNano())
	every, err := baton.Every(100 * time.Millisecond)
	require.NoError(t, err)

	var mu sync.Mutex
	runs := map[string]int{} // tick -> runs
	var clients []*baton.Client
	for range 3 {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		require.NoError(t, err)
		t.Cleanup(rc.Close)
		d, err := batonredis.New(rc, &batonredis.Config{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(d.Close)
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			mu.Lock()
			runs[job.Args.To]++
			mu.Unlock()
			return nil
		}), nil)
		c, err := baton.NewClient(d, &baton.Config{
			Workers: workers, Logger: quiet,
			PeriodicJobs: []*baton.PeriodicJob{{
				Name: "fan-out", Schedule: every,
				Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
					return emailArgs{To: tick.UTC().Format(time.RFC3339Nano)}, nil
				},
			}},
		})
		require.NoError(t, err)
		clients = append(clients, c)
	}
	ctx := context.Background()
	for _, c := range clients {
		require.NoError(t, c.Start(ctx))
	}
	time.Sleep(1200 * time.Millisecond)
	for _, c := range clients {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		require.NoError(t, c.Stop(sctx))
		cancel()
	}

	mu.Lock()
	defer mu.Unlock()
	var ticks []time.Time
	for tick, n := range runs {
		require.Equal(t, 1, n, "tick %s ran %d times", tick, n)
		at, err := time.Parse(time.RFC3339Nano, tick)
		require.NoError(t, err)
		ticks = append(ticks, at)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	require.GreaterOrEqual(t, len(ticks), 8, "ticks: %v", ticks)
	for i := 1; i < len(ticks); i++ {
		require.Equal(t, 100*time.Millisecond, ticks[i].Sub(ticks[i-1]), "a tick was skipped between %v and %v", ticks[i-1], ticks[i])
	}
}

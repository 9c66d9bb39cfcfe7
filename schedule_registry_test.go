package baton_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

func noop(context.Context, *baton.Job[emailArgs]) error { return nil }

func TestScheduleString(t *testing.T) {
	t.Parallel()
	every, err := baton.Every(15 * time.Minute)
	require.NoError(t, err)
	require.Equal(t, "every 15m0s", fmt.Sprint(every))
	for _, spec := range []string{"*/5 * * * *", "@hourly", "CRON_TZ=Europe/Paris 0 6 * * 1-5"} {
		c, err := baton.Cron(spec)
		require.NoError(t, err)
		require.Equal(t, spec, fmt.Sprint(c))
	}
}

// A started client registers its schedule at its first tick, with the
// queue and kind of the job it inserted.
func TestScheduleRegisteredAtTick(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		every, err := baton.Every(50 * time.Millisecond)
		require.NoError(t, err)
		c, _ := setup(t, baton.WorkFunc[emailArgs](noop), &baton.Config{
			PeriodicJobs: []*baton.PeriodicJob{{
				Name: "fan-out", Schedule: every,
				Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
					return emailArgs{}, &baton.InsertOpts{Queue: "mail"}
				},
			}},
		})
		ctx := t.Context()
		list, err := c.ScheduleList(ctx)
		require.NoError(t, err)
		require.Empty(t, list)
		start(t, c)
		var s *baton.ScheduleInfo
		require.Eventually(t, func() bool {
			list, err := c.ScheduleList(ctx)
			require.NoError(t, err)
			if len(list) == 0 || list[0].LastTick.IsZero() {
				return false
			}
			s = list[0]
			return true
		}, 5*time.Second, 20*time.Millisecond)
		now := time.Now()
		require.Equal(t, "fan-out", s.Name)
		require.Equal(t, "mail", s.Queue)
		require.Equal(t, "every 50ms", s.Spec)
		require.Equal(t, "email", s.Kind)
		require.Zero(t, s.LastTick.UnixMilli()%50, "a tick of the schedule")
		require.WithinDuration(t, now.Add(25*time.Millisecond), s.NextTick, 2*time.Second)
		require.WithinDuration(t, now, s.SeenAt, 2*time.Second)
		require.False(t, s.RegisteredAt.After(s.SeenAt))
		require.WithinDuration(t, s.SeenAt.Add(7*24*time.Hour), s.ExpiresAt, time.Second)
	})
}

// A client that starts registers its schedule at once where it was
// registered before, with its own spec, and without calling Job.
func TestScheduleRegisteredAtStart(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		nightly, err := baton.Cron("0 3 * * *")
		require.NoError(t, err)
		var calls atomic.Int32
		c, d := setup(t, baton.WorkFunc[emailArgs](noop), &baton.Config{
			PeriodicJobs: []*baton.PeriodicJob{{
				Name: "nightly", Schedule: nightly,
				Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) {
					calls.Add(1)
					return emailArgs{}, &baton.InsertOpts{Queue: "mail"}
				},
			}},
		})
		ctx := t.Context()
		// An earlier version ran it at 4 o'clock, in queue mail.
		require.NoError(t, d.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
			Queue: "mail", Name: "nightly", Spec: "0 4 * * *", Kind: "email", TTL: time.Hour,
		}))
		_, err = c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "mail"})
		require.NoError(t, err)
		before, err := c.ScheduleList(ctx)
		require.NoError(t, err)
		require.Len(t, before, 1)
		require.Equal(t, "0 4 * * *", before[0].Spec)

		start(t, c)
		var s *baton.ScheduleInfo
		require.Eventually(t, func() bool {
			list, err := c.ScheduleList(ctx)
			require.NoError(t, err)
			require.Len(t, list, 1)
			s = list[0]
			return s.Spec == "0 3 * * *"
		}, 5*time.Second, 20*time.Millisecond)
		require.Equal(t, "mail", s.Queue)
		require.Equal(t, "email", s.Kind)
		require.True(t, s.LastTick.IsZero())
		require.Equal(t, before[0].RegisteredAt, s.RegisteredAt)
		// Seen again (the new spec shows it), perhaps in the same millisecond.
		require.False(t, s.SeenAt.Before(before[0].SeenAt))
		require.Equal(t, nightly.Next(time.Now()), s.NextTick)
		require.Zero(t, calls.Load(), "Job is called at ticks only")
	})
}

// fixed is an application's own schedule, with a spec of its own.
type fixed time.Time

func (f fixed) Next(time.Time) time.Time { return time.Time(f) }
func (fixed) String() string             { return "on launch day" }

// ScheduleList computes the next tick from the spec of Every and Cron, and
// with the client's own schedule of the name and spec.
func TestScheduleListNextTick(t *testing.T) {
	launch := fixed(time.Date(2031, 7, 1, 12, 0, 0, 0, time.UTC))
	c, d := setup(t, nil, &baton.Config{
		AllowUnknownKinds: true,
		PeriodicJobs: []*baton.PeriodicJob{
			{Name: "launch", Schedule: launch, Job: func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return emailArgs{}, nil }},
		},
	})
	ctx := t.Context()
	for name, spec := range map[string]string{
		"hourly": "every 1h0m0s", "nightly": "0 3 * * *", "launch": "on launch day",
		"custom": "on a whim", "blank": "", "bad-every": "every 5", "tiny-every": "every 1ms",
	} {
		require.NoError(t, d.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
			Queue: "default", Name: name, Spec: spec, Kind: "email", TTL: time.Hour,
		}))
	}
	_, err := c.Insert(ctx, emailArgs{}, nil)
	require.NoError(t, err)
	list, err := c.ScheduleList(ctx)
	require.NoError(t, err)
	next := map[string]time.Time{}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
		next[s.Name] = s.NextTick
	}
	require.Equal(t, []string{"bad-every", "blank", "custom", "hourly", "launch", "nightly", "tiny-every"}, names)
	hourly, _ := baton.Every(time.Hour)
	nightly, _ := baton.Cron("0 3 * * *")
	now := time.Now()
	require.WithinDuration(t, hourly.Next(now), next["hourly"], time.Second)
	require.WithinDuration(t, nightly.Next(now), next["nightly"], time.Second)
	require.Equal(t, time.Time(launch), next["launch"])
	for _, name := range []string{"custom", "blank", "bad-every", "tiny-every"} {
		require.True(t, next[name].IsZero(), name)
	}
}

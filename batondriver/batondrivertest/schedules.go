package batondrivertest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// register records a schedule in the fixture's queue.
func (f *jobFixture) register(name, spec, kind string, ttl time.Duration) {
	f.t.Helper()
	require.NoError(f.t, f.d.QueueScheduleRegister(f.ctx, &batondriver.QueueScheduleParams{
		Queue: f.queue, Name: name, Spec: spec, Kind: kind, TTL: ttl,
	}))
}

// schedules lists the fixture's queue's schedules.
func (f *jobFixture) schedules() []*batondriver.QueueSchedule {
	f.t.Helper()
	res, err := f.d.QueueScheduleList(f.ctx, &batondriver.QueueParams{Queue: f.queue})
	require.NoError(f.t, err)
	require.Equal(f.t, f.queue, res.Queue)
	require.NotNil(f.t, res.Schedules)
	return res.Schedules
}

func scheduleNames(ss []*batondriver.QueueSchedule) []string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = s.Name
	}
	return names
}

func exerciseSchedules(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("RegisterAndList", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		require.Empty(t, f.schedules(), "a queue never used")
		now := time.Now()
		f.register("report", "0 6 * * *", "report", time.Hour)
		f.register("fan-out", "every 15m0s", "sync", time.Hour)
		ss := f.schedules()
		require.Equal(t, []string{"fan-out", "report"}, scheduleNames(ss), "by name")
		s := ss[0]
		require.Equal(t, "every 15m0s", s.Spec)
		require.Equal(t, "sync", s.Kind)
		require.True(t, s.LastTick.IsZero(), "no tick inserted yet")
		requireNear(t, now, s.RegisteredAt, clockSlack)
		requireNear(t, s.RegisteredAt, s.SeenAt, storeSlack)
		requireNear(t, s.SeenAt.Add(time.Hour), s.ExpiresAt, storeSlack)

		tick := time.Now().Truncate(time.Second).Add(time.Hour)
		_, err := f.d.JobInsert(f.ctx, &batondriver.JobInsertParams{
			Queue: f.queue, Jobs: []*batondriver.JobInsert{newJob()},
			Once: &batondriver.JobInsertOnce{Name: "fan-out", Tick: tick},
		})
		require.NoError(t, err)
		ss = f.schedules()
		requireNear(t, tick, ss[0].LastTick, storeSlack)
		require.True(t, ss[1].LastTick.IsZero(), "ticks are per name")

		other := &jobFixture{t: t, d: f.d, ctx: f.ctx, queue: uniqueQueue()}
		require.Empty(t, other.schedules(), "schedules are per queue")
	})

	t.Run("RegisterRefreshes", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.register("s", "every 1m0s", "sync", time.Hour)
		first := f.schedules()[0]
		time.Sleep(20 * time.Millisecond)
		f.register("s", "every 2m0s", "", 2*time.Hour)
		ss := f.schedules()
		require.Len(t, ss, 1)
		s := ss[0]
		require.Equal(t, "every 2m0s", s.Spec, "the spec is replaced")
		require.Equal(t, "sync", s.Kind, "an empty kind keeps the one recorded")
		requireNear(t, first.RegisteredAt, s.RegisteredAt, storeSlack)
		require.Greater(t, s.SeenAt.Sub(first.SeenAt), 10*time.Millisecond, "seen again")
		requireNear(t, s.SeenAt.Add(2*time.Hour), s.ExpiresAt, storeSlack)
		f.register("s", "every 2m0s", "other", time.Hour)
		require.Equal(t, "other", f.schedules()[0].Kind)
	})

	t.Run("RegistrationExpires", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.register("short", "every 1m0s", "sync", 50*time.Millisecond)
		f.register("long", "every 1m0s", "sync", time.Hour)
		first := f.schedules()
		require.Len(t, first, 2)
		f.eventually("the short registration expires", func() bool { return len(f.schedules()) == 1 })
		require.Equal(t, "long", f.schedules()[0].Name)

		// Registered again after it expired, it is new.
		time.Sleep(10 * time.Millisecond)
		f.register("short", "every 1m0s", "", time.Hour)
		ss := f.schedules()
		require.Equal(t, []string{"long", "short"}, scheduleNames(ss))
		require.Empty(t, ss[1].Kind, "an expired record's kind is forgotten")
		require.Greater(t, ss[1].RegisteredAt.Sub(first[1].RegisteredAt), 10*time.Millisecond)
	})

	t.Run("RegisterNotListedAsQueue", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.register("s", "every 1m0s", "sync", time.Hour)
		qs, err := f.d.QueueList(f.ctx)
		require.NoError(t, err)
		require.NotContains(t, qs, f.queue, "a queue that never had a job")
		// Pausing and resuming the queue keeps the registration.
		f.pause(false)
		f.pause(true)
		require.Len(t, f.schedules(), 1)
	})

	t.Run("RegisterBadParams", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		for name, p := range map[string]batondriver.QueueScheduleParams{
			"no queue":  {Name: "s", TTL: time.Hour},
			"no name":   {Queue: f.queue, TTL: time.Hour},
			"long name": {Queue: f.queue, Name: strings.Repeat("n", batondriver.MaxScheduleNameLen+1), TTL: time.Hour},
			"long spec": {Queue: f.queue, Name: "s", Spec: strings.Repeat("s", batondriver.MaxScheduleSpecLen+1), TTL: time.Hour},
			"long kind": {Queue: f.queue, Name: "s", Kind: strings.Repeat("k", batondriver.MaxScheduleKindLen+1), TTL: time.Hour},
			"no TTL":    {Queue: f.queue, Name: "s"},
		} {
			err := f.d.QueueScheduleRegister(f.ctx, &p)
			require.ErrorIs(t, err, batondriver.ErrBadParams, name)
		}
		_, err := f.d.QueueScheduleList(f.ctx, &batondriver.QueueParams{})
		require.ErrorIs(t, err, batondriver.ErrBadParams)
		require.Empty(t, f.schedules())
		// The longest of everything is fine, and odd bytes are kept.
		name := strings.Repeat("n", batondriver.MaxScheduleNameLen-4) + "{é}"
		spec := strings.Repeat("s", batondriver.MaxScheduleSpecLen-5) + `"\` + "\t{}"
		f.register(name, spec, strings.Repeat("k", batondriver.MaxScheduleKindLen), time.Hour)
		ss := f.schedules()
		require.Len(t, ss, 1)
		require.Equal(t, name, ss[0].Name)
		require.Equal(t, spec, ss[0].Spec)
	})
}

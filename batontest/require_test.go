package batontest_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batontest"
	"github.com/batonhq/baton/internal/redistest"
)

type syncArgs struct {
	UserID int `json:"user_id"`
}

func (syncArgs) Kind() string { return "sync_user" }

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

var quiet = slog.New(slog.DiscardHandler)

// setup returns an insert-only client on a fresh memory backend.
func setup(t *testing.T) *baton.Client {
	t.Helper()
	t.Parallel()
	return newClient(t, batonmem.New())
}

func newClient(t *testing.T, d batondriver.JobDriver) *baton.Client {
	t.Helper()
	c, err := baton.NewClient(d, &baton.Config{Logger: quiet})
	require.NoError(t, err)
	return c
}

func insert(t *testing.T, c *baton.Client, args baton.JobArgs, opts *baton.InsertOpts) *baton.JobRow {
	t.Helper()
	res, err := c.Insert(t.Context(), args, opts)
	require.NoError(t, err)
	return res.Job
}

func priority(p int) *int { return &p }

// timeFormat is how the failures show times.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func TestRequireInserted(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	insert(t, c, emailArgs{To: "a@example.com"}, nil)
	row := insert(t, c, syncArgs{UserID: 42}, &baton.InsertOpts{Queue: "sync", Priority: 3, Tags: []string{"nightly", "eu"}})

	var job *baton.Job[syncArgs]
	f := run(func(tb testing.TB) { job = batontest.RequireInserted[syncArgs](ctx, tb, c, nil) })
	requirePassed(t, f)
	require.True(t, f.helperOK, "the helper calls tb.Helper")
	require.Equal(t, row.ID, job.ID)
	require.Equal(t, 42, job.Args.UserID)
	require.Equal(t, baton.JobStateAvailable, job.State)

	f = run(func(tb testing.TB) {
		job = batontest.RequireInserted[syncArgs](ctx, tb, c, &batontest.RequireInsertedOpts{
			Queue:    "sync",
			States:   []baton.JobState{baton.JobStateAvailable, baton.JobStateScheduled},
			Priority: priority(3),
			Tags:     []string{"eu"},
			Match:    batontest.MatchArgs(func(a syncArgs) bool { return a.UserID == 42 }),
		})
	})
	requirePassed(t, f)
	require.Equal(t, row.ID, job.ID)

	at := time.Now().Add(time.Hour)
	later := insert(t, c, syncArgs{UserID: 43}, &baton.InsertOpts{RunAt: at, MaxAttempts: 3})
	soon := insert(t, c, syncArgs{UserID: 44}, &baton.InsertOpts{Delay: time.Minute})
	for _, tc := range []struct {
		opts *batontest.RequireInsertedOpts
		want string
	}{
		{&batontest.RequireInsertedOpts{RunAt: at}, later.ID},
		{&batontest.RequireInsertedOpts{MaxAttempts: 3}, later.ID},
		{&batontest.RequireInsertedOpts{RunAt: time.Now().Add(time.Minute), RunAtWithin: time.Second}, soon.ID},
	} {
		f = run(func(tb testing.TB) { job = batontest.RequireInserted[syncArgs](ctx, tb, c, tc.opts) })
		requirePassed(t, f)
		require.Equal(t, tc.want, job.ID)
	}
}

func TestRequireInsertedFailsWithoutAJobOfTheKind(t *testing.T) {
	c := setup(t)
	insert(t, c, emailArgs{To: "a@example.com"}, nil)
	f := run(func(tb testing.TB) { batontest.RequireInserted[syncArgs](t.Context(), tb, c, nil) })
	requireFatal(t, f, `expected one job of kind "sync_user"; 0 match`, `no job of kind "sync_user" at all`)
}

// Each option that a job fails is named in the failure, next to the job.
func TestRequireInsertedFailsOnAMismatch(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	row := insert(t, c, syncArgs{UserID: 42}, &baton.InsertOpts{Delay: time.Hour, Priority: 2, Tags: []string{"eu"}})
	for _, tc := range []struct {
		opts *batontest.RequireInsertedOpts
		want []string
	}{
		{&batontest.RequireInsertedOpts{Queue: "mail"}, []string{`with queue "mail"; 0 match`, `not in queue "mail"`}},
		{&batontest.RequireInsertedOpts{States: []baton.JobState{baton.JobStateAvailable}}, []string{"with state available; 0 match", "state scheduled", "— not available"}},
		{&batontest.RequireInsertedOpts{Priority: priority(0)}, []string{"with priority 0", "priority 2", "— not priority 0"}},
		{&batontest.RequireInsertedOpts{Key: "user:42"}, []string{`with key "user:42"`, `— not key "user:42"`}},
		{&batontest.RequireInsertedOpts{MaxAttempts: 3}, []string{"with max attempts 3", "— max attempts 25, not 3"}},
		{&batontest.RequireInsertedOpts{RunAt: row.RunAt.Add(-time.Minute), RunAtWithin: time.Second}, []string{
			"with due " + row.RunAt.Add(-time.Minute).Format(timeFormat) + " ± 1s",
			"— due " + row.RunAt.Format(timeFormat) + ", not " + row.RunAt.Add(-time.Minute).Format(timeFormat) + " ± 1s",
		}},
		{&batontest.RequireInsertedOpts{Tags: []string{"eu", "us"}}, []string{`with tags ["eu" "us"]`, `— no tag "us"`}},
		{&batontest.RequireInsertedOpts{Match: batontest.MatchArgs(func(a syncArgs) bool { return a.UserID == 7 })}, []string{"with Match true", `args {"user_id":42} — Match is false`}},
	} {
		f := run(func(tb testing.TB) { batontest.RequireInserted[syncArgs](ctx, tb, c, tc.opts) })
		requireFatal(t, f, append(tc.want, `jobs of kind "sync_user" found (1):`, row.ID)...)
	}
}

func TestRequireInsertedFailsOnTwoMatches(t *testing.T) {
	c := setup(t)
	a := insert(t, c, syncArgs{UserID: 1}, nil)
	b := insert(t, c, syncArgs{UserID: 2}, &baton.InsertOpts{Queue: "other"})
	f := run(func(tb testing.TB) { batontest.RequireInserted[syncArgs](t.Context(), tb, c, nil) })
	requireFatal(t, f, "; 2 match", `jobs of kind "sync_user" found (2):`,
		a.ID+` kind "sync_user" queue "default" state available priority 0 max attempts 25 due `+a.RunAt.Format(timeFormat)+` args {"user_id":1} — matches`,
		b.ID+` kind "sync_user" queue "other" state available priority 0 max attempts 25 due `+b.RunAt.Format(timeFormat)+` args {"user_id":2} — matches`)
}

// A job counts whatever became of it: here, parked behind its key.
func TestRequireInsertedFindsAParkedJob(t *testing.T) {
	c := setup(t)
	byUser := &baton.ConcurrencyOpts{Key: baton.KeyOf(func(a syncArgs) string { return fmt.Sprint("user:", a.UserID) })}
	insert(t, c, syncArgs{UserID: 1}, &baton.InsertOpts{Concurrency: byUser})
	second := insert(t, c, syncArgs{UserID: 1}, &baton.InsertOpts{Concurrency: byUser})
	var job *baton.Job[syncArgs]
	f := run(func(tb testing.TB) {
		job = batontest.RequireInserted[syncArgs](t.Context(), tb, c, &batontest.RequireInsertedOpts{
			Key: "user:1", States: []baton.JobState{baton.JobStateParked},
		})
	})
	requirePassed(t, f)
	require.Equal(t, second.ID, job.ID)
}

func TestRequireNotInserted(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	f := run(func(tb testing.TB) { batontest.RequireNotInserted[syncArgs](ctx, tb, c, nil) })
	requirePassed(t, f)

	row := insert(t, c, syncArgs{UserID: 42}, &baton.InsertOpts{Queue: "sync"})
	f = run(func(tb testing.TB) {
		batontest.RequireNotInserted[syncArgs](ctx, tb, c, &batontest.RequireInsertedOpts{Queue: "other"})
		batontest.RequireNotInserted[emailArgs](ctx, tb, c, nil)
	})
	requirePassed(t, f)

	f = run(func(tb testing.TB) { batontest.RequireNotInserted[syncArgs](ctx, tb, c, nil) })
	requireFatal(t, f, `expected no job of kind "sync_user"; 1 match`, row.ID+` kind "sync_user" queue "sync" state available`)
	f = run(func(tb testing.TB) {
		batontest.RequireNotInserted[syncArgs](ctx, tb, c, &batontest.RequireInsertedOpts{
			Match: batontest.MatchArgs(func(a syncArgs) bool { return a.UserID == 42 }),
		})
	})
	requireFatal(t, f, `expected no job of kind "sync_user" with Match true; 1 match`)
}

func TestRequireManyInserted(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	a := insert(t, c, syncArgs{UserID: 1}, nil)
	b := insert(t, c, emailArgs{To: "a@example.com"}, &baton.InsertOpts{Queue: "mail"})
	d := insert(t, c, syncArgs{UserID: 2}, &baton.InsertOpts{Delay: time.Hour})

	var rows []*baton.JobRow
	f := run(func(tb testing.TB) {
		rows = batontest.RequireManyInserted(ctx, tb, c, []batontest.ExpectedJob{
			{Args: syncArgs{}},
			{Args: emailArgs{}, Opts: &batontest.RequireInsertedOpts{Queue: "mail"}},
			{Args: syncArgs{}, Opts: &batontest.RequireInsertedOpts{States: []baton.JobState{baton.JobStateScheduled}}},
		})
	})
	requirePassed(t, f)
	require.Equal(t, []string{a.ID, b.ID, d.ID}, []string{rows[0].ID, rows[1].ID, rows[2].ID})

	// Only the kinds named count: the emails are not looked at here.
	f = run(func(tb testing.TB) {
		rows = batontest.RequireManyInserted(ctx, tb, c, []batontest.ExpectedJob{{Args: syncArgs{}}, {Args: syncArgs{}}})
	})
	requirePassed(t, f)
	require.Len(t, rows, 2)

	f = run(func(tb testing.TB) {
		batontest.RequireManyInserted(ctx, tb, c, []batontest.ExpectedJob{{Args: emailArgs{}}, {Args: syncArgs{}}, {Args: syncArgs{}}})
	})
	requireFatal(t, f, `expected 3 jobs of kinds ["email" "sync_user"], in this order:`,
		"\t1. kind \"email\"\n", "found 3:",
		"\t1. "+a.ID+` kind "sync_user" queue "default" state available priority 0 max attempts 25 due `+a.RunAt.Format(timeFormat)+
			` args {"user_id":1} — expected kind "email"`)

	f = run(func(tb testing.TB) {
		batontest.RequireManyInserted(ctx, tb, c, []batontest.ExpectedJob{{Args: syncArgs{}}})
	})
	requireFatal(t, f, `expected 1 jobs of kinds ["sync_user"]`, "found 2:", "\t2. "+d.ID, "state scheduled", "— not expected")

	f = run(func(tb testing.TB) {
		batontest.RequireManyInserted(ctx, tb, c, []batontest.ExpectedJob{
			{Args: syncArgs{}}, {Args: syncArgs{}, Opts: &batontest.RequireInsertedOpts{Queue: "mail"}},
		})
	})
	requireFatal(t, f, "\t2. kind \"sync_user\" with queue \"mail\"", "\t2. "+d.ID, `— not in queue "mail"`)
}

// The helpers read the backend through the admin API alone: they work on
// Redis as in memory.
func TestRequireOnRedis(t *testing.T) {
	t.Parallel()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.SharedServer(t).Addr()}})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	d, err := batonredis.New(rc, &batonredis.Config{Prefix: fmt.Sprintf("bt%d", time.Now().UnixNano())})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	c := newClient(t, d)
	ctx := context.Background()

	at := time.Now().Add(time.Hour) // to the nanosecond: Redis keeps milliseconds
	a := insert(t, c, syncArgs{UserID: 1}, &baton.InsertOpts{Queue: "sync", Tags: []string{"eu"}, RunAt: at})
	b := insert(t, c, emailArgs{To: "a@example.com"}, nil)
	var job *baton.Job[syncArgs]
	var rows []*baton.JobRow
	f := run(func(tb testing.TB) {
		job = batontest.RequireInserted[syncArgs](ctx, tb, c, &batontest.RequireInsertedOpts{Queue: "sync", Tags: []string{"eu"}, RunAt: at})
		batontest.RequireNotInserted[syncArgs](ctx, tb, c, &batontest.RequireInsertedOpts{Queue: "default"})
		rows = batontest.RequireManyInserted(ctx, tb, c, []batontest.ExpectedJob{{Args: syncArgs{}}, {Args: emailArgs{}}})
	})
	requirePassed(t, f)
	require.Equal(t, a.ID, job.ID)
	require.Equal(t, b.ID, rows[1].ID)
	f = run(func(tb testing.TB) {
		batontest.RequireInserted[syncArgs](ctx, tb, c, &batontest.RequireInsertedOpts{Queue: "default"})
	})
	requireFatal(t, f, a.ID+` kind "sync_user" queue "sync" state scheduled`, `not in queue "default"`)
}

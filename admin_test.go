package baton_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// TestQueueStatsAll: every queue that had a job, by name, each as
// QueueStats reads it; none on an empty backend.
func TestQueueStatsAll(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T) {
		c, _ := setup(t, nil, &baton.Config{AllowUnknownKinds: true})
		ctx := t.Context()

		all, err := c.QueueStatsAll(ctx)
		require.NoError(t, err)
		require.NotNil(t, all)
		require.Empty(t, all)

		for _, opts := range []*baton.InsertOpts{
			{Queue: "mail"}, {Queue: "mail", Delay: time.Hour}, {Queue: "billing"}, nil, // nil: "default"
		} {
			_, err := c.Insert(ctx, emailArgs{To: "a@x"}, opts)
			require.NoError(t, err)
		}
		require.NoError(t, c.QueuePause(ctx, "billing"))

		all, err = c.QueueStatsAll(ctx)
		require.NoError(t, err)
		var names []string
		for _, st := range all {
			names = append(names, st.Queue)
			one, err := c.QueueStats(ctx, st.Queue)
			require.NoError(t, err)
			require.Equal(t, one, st)
		}
		require.Equal(t, []string{"billing", "default", "mail"}, names)
		require.True(t, all[0].Paused)
		require.Equal(t, 1, all[2].Counts[baton.JobStateAvailable])
		require.Equal(t, 1, all[2].Counts[baton.JobStateScheduled])
	})
}

// faultyDriver fails the calls it is told to; the rest go to the memory
// backend.
type faultyDriver struct {
	batondriver.JobDriver
	listErr  error
	statsErr map[string]error // by queue
	onStats  func(queue string)
	read     []string // the queues QueueStats was called for
}

func (d *faultyDriver) QueueList(ctx context.Context) ([]string, error) {
	if d.listErr != nil {
		return nil, d.listErr
	}
	return d.JobDriver.QueueList(ctx)
}

func (d *faultyDriver) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	d.read = append(d.read, p.Queue)
	if d.onStats != nil {
		d.onStats(p.Queue)
	}
	if err := d.statsErr[p.Queue]; err != nil {
		return nil, err
	}
	return d.JobDriver.QueueStats(ctx, p)
}

// TestQueueStatsAllErrors: a failed list is an error and no stats; a queue
// that cannot be read is left out, the others are read, and the error joins
// one error per failed queue; a done context ends the reading.
func TestQueueStatsAllErrors(t *testing.T) {
	t.Parallel()
	newClient := func(t *testing.T) (*baton.Client, *faultyDriver) {
		t.Helper()
		d := &faultyDriver{JobDriver: batonmem.New()}
		c, err := baton.NewClient(d, &baton.Config{AllowUnknownKinds: true, Logger: quiet})
		require.NoError(t, err)
		for _, q := range []string{"c", "a", "d", "b"} {
			_, err := c.Insert(t.Context(), emailArgs{To: q}, &baton.InsertOpts{Queue: q})
			require.NoError(t, err)
		}
		return c, d
	}
	queues := func(all []*baton.QueueStats) []string {
		var out []string
		for _, st := range all {
			out = append(out, st.Queue)
		}
		return out
	}
	down := errors.New("backend down")

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		c, d := newClient(t)
		d.listErr = down
		all, err := c.QueueStatsAll(t.Context())
		require.ErrorIs(t, err, down)
		require.Nil(t, all)
		require.Empty(t, d.read)
	})

	t.Run("OneQueue", func(t *testing.T) {
		t.Parallel()
		c, d := newClient(t)
		d.statsErr = map[string]error{"b": down}
		all, err := c.QueueStatsAll(t.Context())
		require.ErrorIs(t, err, down)
		require.ErrorContains(t, err, `"b"`)
		require.Equal(t, []string{"a", "c", "d"}, queues(all))
	})

	t.Run("TwoQueues", func(t *testing.T) {
		t.Parallel()
		c, d := newClient(t)
		other := errors.New("slot moved")
		d.statsErr = map[string]error{"a": down, "c": other}
		all, err := c.QueueStatsAll(t.Context())
		require.ErrorIs(t, err, down)
		require.ErrorIs(t, err, other)
		var joined interface{ Unwrap() []error }
		require.ErrorAs(t, err, &joined)
		require.Len(t, joined.Unwrap(), 2, "one error per failed queue")
		require.Equal(t, []string{"b", "d"}, queues(all))
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		c, d := newClient(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.statsErr = map[string]error{"b": context.Canceled}
		d.onStats = func(q string) {
			if q == "b" {
				cancel()
			}
		}
		all, err := c.QueueStatsAll(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, []string{"a"}, queues(all))
		require.Equal(t, []string{"a", "b"}, d.read, "nothing is read after the context ends")
	})
}

// TestJobRetryable: JobRetryable says what JobRetry does, state by state.
func TestJobRetryable(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T) {
		c, d := setup(t, nil, &baton.Config{AllowUnknownKinds: true})
		ctx := t.Context()
		insert := func(opts *baton.InsertOpts) string {
			t.Helper()
			res, err := c.Insert(ctx, emailArgs{To: "a@x"}, opts)
			require.NoError(t, err)
			return res.Job.ID
		}
		fetch := func(queue string) *batondriver.JobRow {
			t.Helper()
			res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: 1, LeaseTTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
			return res.Jobs[0]
		}
		finish := func(queue string, outcome batondriver.JobOutcome) string {
			t.Helper()
			j := fetch(queue)
			_, err := d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Retention: time.Hour, Finished: []*batondriver.JobFinish{
				{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: outcome, Error: "boom"},
			}})
			require.NoError(t, err)
			return j.ID
		}
		keyed := func(queue string, onBusy baton.OnBusy) *baton.InsertOpts {
			return &baton.InsertOpts{Queue: queue, Concurrency: &baton.ConcurrencyOpts{
				Key: baton.KeyOf(func(emailArgs) string { return "k" }), OnBusy: onBusy,
			}}
		}

		ids := map[baton.JobState]string{}
		insert(&baton.InsertOpts{Queue: "dead"})
		ids[baton.JobStateDead] = finish("dead", batondriver.JobOutcomeDead)
		insert(&baton.InsertOpts{Queue: "cancelled"})
		ids[baton.JobStateCancelled] = finish("cancelled", batondriver.JobOutcomeCancel)
		insert(&baton.InsertOpts{Queue: "completed"})
		ids[baton.JobStateCompleted] = finish("completed", batondriver.JobOutcomeCompleted)
		insert(&baton.InsertOpts{Queue: "running"})
		ids[baton.JobStateRunning] = fetch("running").ID
		ids[baton.JobStateScheduled] = insert(&baton.InsertOpts{Queue: "scheduled", Delay: time.Hour})
		ids[baton.JobStateAvailable] = insert(&baton.InsertOpts{Queue: "available"})
		insert(keyed("parked", baton.OnBusyWait))
		ids[baton.JobStateParked] = insert(keyed("parked", baton.OnBusyWait))
		insert(keyed("dropped", baton.OnBusyDrop))
		ids[baton.JobStateDropped] = insert(keyed("dropped", baton.OnBusyDrop))

		for _, state := range baton.JobStates {
			queue := string(state)
			id, ok := ids[state]
			require.True(t, ok, "no job seeded in state %s", state)
			row, err := c.JobGet(ctx, queue, id)
			require.NoError(t, err)
			require.Equal(t, state, row.State, "seeded job of queue %s", queue)
			_, err = c.JobRetry(ctx, queue, id)
			if baton.JobRetryable(state) {
				require.NoError(t, err, "retry a %s job", state)
			} else {
				require.ErrorIs(t, err, batondriver.ErrBadParams, "retry a %s job", state)
			}
		}
	})
}

// QueueStatsAll reads every queue's counts, by queue name: what a
// dashboard's overview shows.
func ExampleClient_QueueStatsAll() {
	client, _ := baton.NewClient(batonmem.New(), &baton.Config{AllowUnknownKinds: true, Logger: quiet})
	ctx := context.Background()
	_, _ = client.Insert(ctx, WebhookArgs{Customer: "acme"}, &baton.InsertOpts{Queue: "webhooks"})
	_, _ = client.Insert(ctx, WebhookArgs{Customer: "acme"}, &baton.InsertOpts{Queue: "webhooks", Delay: time.Hour})
	_, _ = client.Insert(ctx, SyncArgs{UserID: 1}, nil)
	_ = client.QueuePause(ctx, "webhooks")

	stats, err := client.QueueStatsAll(ctx)
	if err != nil {
		panic(err)
	}
	for _, st := range stats {
		fmt.Printf("%s: %d available, %d scheduled, paused %v\n",
			st.Queue, st.Counts[baton.JobStateAvailable], st.Counts[baton.JobStateScheduled], st.Paused)
	}
	// Output:
	// default: 1 available, 0 scheduled, paused false
	// webhooks: 1 available, 1 scheduled, paused true
}

// TestBadQueueNameIsBadParams: every call that takes a queue name refuses a
// bad one with an error wrapping batondriver.ErrBadParams, so that a caller
// (the CLI, the dashboard) tells it from a backend failure, and names the
// queue.
func TestBadQueueNameIsBadParams(t *testing.T) {
	c, _ := setup(t, nil, &baton.Config{AllowUnknownKinds: true})
	ctx := t.Context()
	for _, q := range []string{"", "a b", "x!"} {
		calls := map[string]func() error{
			"JobGet":      func() error { _, err := c.JobGet(ctx, q, "x"); return err },
			"JobList":     func() error { _, _, err := c.JobList(ctx, q, baton.JobStateDead, nil); return err },
			"JobRetry":    func() error { _, err := c.JobRetry(ctx, q, "x"); return err },
			"JobDelete":   func() error { return c.JobDelete(ctx, q, "x") },
			"QueueStats":  func() error { _, err := c.QueueStats(ctx, q); return err },
			"QueuePause":  func() error { return c.QueuePause(ctx, q) },
			"QueueResume": func() error { return c.QueueResume(ctx, q) },
			"KeyList":     func() error { _, _, err := c.KeyList(ctx, q, nil); return err },
			"KeyGet":      func() error { _, err := c.KeyGet(ctx, q, "k"); return err },
			"SetLimit":    func() error { _, err := c.SetLimit(ctx, q, "k", 1); return err },
			"ResetLimit":  func() error { _, err := c.ResetLimit(ctx, q, "k"); return err },
			"Insert": func() error {
				_, err := c.Insert(ctx, emailArgs{To: "a@x"}, &baton.InsertOpts{Queue: q})
				return err
			},
		}
		if q == "" {
			delete(calls, "Insert") // the default queue
		}
		for name, call := range calls {
			err := call()
			require.ErrorIs(t, err, batondriver.ErrBadParams, "%s(%q)", name, q)
			require.ErrorContains(t, err, fmt.Sprintf("queue name %q", q), "%s(%q)", name, q)
		}
	}
}

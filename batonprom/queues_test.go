package batonprom_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonprom"
	"github.com/batonhq/baton/internal/redistest"
)

// TestQueuesRedis reads queue state from Redis at scrape: every state,
// paused, active keys, the dropped counter, and the queues listed by the
// backend when none are named.
func TestQueuesRedis(t *testing.T) {
	m, reg := setup(t, &batonprom.Config{ConstLabels: map[string]string{"service": "billing"}})
	ctx := context.Background()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{redistest.SharedServer(t).Addr()}})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	driver, err := batonredis.New(rc, &batonredis.Config{Prefix: fmt.Sprintf("bp%d", time.Now().UnixNano())})
	require.NoError(t, err)
	t.Cleanup(driver.Close)
	client, err := baton.NewClient(driver, &baton.Config{Logger: quiet}) // insert-only: nothing runs
	require.NoError(t, err)
	m.CollectQueues(client)

	insert := func(args baton.JobArgs, opts *baton.InsertOpts) {
		t.Helper()
		_, err := client.Insert(ctx, args, opts)
		require.NoError(t, err)
	}
	mail := func(o baton.InsertOpts) *baton.InsertOpts { o.Queue = "mail"; return &o }
	user := func(onBusy baton.OnBusy) *baton.ConcurrencyOpts {
		return &baton.ConcurrencyOpts{Key: baton.KeyOf(func(a keyedArgs) string { return fmt.Sprintf("user:%d", a.User) }), OnBusy: onBusy}
	}
	insert(taskArgs{Do: "a"}, mail(baton.InsertOpts{}))
	insert(taskArgs{Do: "b"}, mail(baton.InsertOpts{Delay: time.Hour}))
	insert(keyedArgs{User: 1}, mail(baton.InsertOpts{Concurrency: user(baton.OnBusyDrop)}))
	insert(keyedArgs{User: 1}, mail(baton.InsertOpts{Concurrency: user(baton.OnBusyDrop)}))
	insert(keyedArgs{User: 2}, mail(baton.InsertOpts{Concurrency: user(baton.OnBusyWait)}))
	insert(keyedArgs{User: 2}, mail(baton.InsertOpts{Concurrency: user(baton.OnBusyWait)}))
	insert(taskArgs{Do: "c"}, &baton.InsertOpts{Queue: "other"})
	require.NoError(t, client.QueuePause(ctx, "mail"))

	got := gather(t, reg)
	lbl := func(name, queue string) string { return name + `{queue="` + queue + `",service="billing"}` }
	state := func(queue, st string) string {
		return `baton_queue_jobs{queue="` + queue + `",service="billing",state="` + st + `"}`
	}
	want := map[string]float64{
		state("mail", "available"):                           3, // a, user:1, user:2
		state("mail", "scheduled"):                           1,
		state("mail", "parked"):                              1,
		state("mail", "running"):                             0,
		state("mail", "completed"):                           0,
		state("mail", "cancelled"):                           0,
		state("mail", "dead"):                                0,
		state("mail", "dropped"):                             1,
		state("other", "available"):                          1,
		lbl("baton_queue_paused", "mail"):                    1,
		lbl("baton_queue_paused", "other"):                   0,
		lbl("baton_queue_active_keys", "mail"):               2,
		lbl("baton_queue_active_keys", "other"):              0,
		lbl("baton_jobs_dropped_total", "mail"):              1,
		lbl("baton_jobs_dropped_total", "other"):             0,
		`baton_queue_scrape_errors_total{service="billing"}`: 0,
	}
	for k, v := range want {
		require.Contains(t, got, k)
		require.Equal(t, v, got[k], k)
	}
	age := got[lbl("baton_queue_oldest_available_age_seconds", "mail")]
	require.GreaterOrEqual(t, age, 0.0)
	require.Less(t, age, 60.0)
	require.Equal(t, []string{"mail", "other"}, labelValues(t, reg)["queue"])
}

// failingDriver is a memory backend that cannot read the stats of one
// queue.
type failingDriver struct {
	batondriver.JobDriver
	queue string
}

func (d *failingDriver) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	if p.Queue == d.queue {
		return nil, errors.New("slot unreachable")
	}
	return d.JobDriver.QueueStats(ctx, p)
}

// TestQueuesSameName: a queue that several CollectQueues calls name or list
// is reported once — not added up — from the first call that has it, so
// that two backends with a queue of the same name do not fail the gather.
// A call that names the queue claims it even when its read fails (a gap,
// not another backend's figures); one that lists every queue claims only
// those it read.
func TestQueuesSameName(t *testing.T) {
	t.Parallel()
	// newClient returns an insert-only client on a backend of its own
	// holding n available jobs in queue "shared", and one job in queue only.
	newClient := func(t *testing.T, n int, only, failing string) *baton.Client {
		t.Helper()
		d := &failingDriver{JobDriver: batonmem.New(), queue: failing}
		c, err := baton.NewClient(d, &baton.Config{Logger: quiet, AllowUnknownKinds: true})
		require.NoError(t, err)
		for range n {
			_, err := c.Insert(context.Background(), taskArgs{Do: "complete"}, &baton.InsertOpts{Queue: "shared"})
			require.NoError(t, err)
		}
		_, err = c.Insert(context.Background(), taskArgs{Do: "complete"}, &baton.InsertOpts{Queue: only})
		require.NoError(t, err)
		return c
	}
	const shared = `baton_queue_jobs{queue="shared",state="available"}`

	for _, tc := range []struct {
		name    string
		collect func(m *batonprom.Metrics, one, three, failing *baton.Client)
		want    float64 // the shared queue's available jobs; 0: not reported
		errors  float64
		queues  []string // every queue reported
	}{
		{"ListedTwice", func(m *batonprom.Metrics, one, three, _ *baton.Client) {
			m.CollectQueues(one)
			m.CollectQueues(three)
		}, 1, 0, []string{"only-one", "only-three", "shared"}},
		{"ListedTwiceOtherOrder", func(m *batonprom.Metrics, one, three, _ *baton.Client) {
			m.CollectQueues(three)
			m.CollectQueues(one)
		}, 3, 0, []string{"only-one", "only-three", "shared"}},
		{"NamedThenListed", func(m *batonprom.Metrics, one, three, _ *baton.Client) {
			m.CollectQueues(three, "shared", "shared") // named twice by one call too
			m.CollectQueues(one)
		}, 3, 0, []string{"only-one", "shared"}},
		{"NamedFailsLeavesGap", func(m *batonprom.Metrics, one, _, failing *baton.Client) {
			m.CollectQueues(failing, "shared")
			m.CollectQueues(one)
		}, 0, 1, []string{"only-one"}},
		{"ListedFailsNextHasIt", func(m *batonprom.Metrics, one, _, failing *baton.Client) {
			m.CollectQueues(failing)
			m.CollectQueues(one)
		}, 1, 1, []string{"only-failing", "only-one", "shared"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, reg := setup(t, nil)
			one, three := newClient(t, 1, "only-one", ""), newClient(t, 3, "only-three", "")
			failing := newClient(t, 2, "only-failing", "shared")
			tc.collect(m, one, three, failing)

			got := gather(t, reg) // fails on a series collected twice
			if tc.want == 0 {
				require.NotContains(t, got, shared)
			} else {
				require.Equal(t, tc.want, got[shared])
			}
			require.Equal(t, tc.errors, got["baton_queue_scrape_errors_total"])
			require.Equal(t, tc.queues, labelValues(t, reg)["queue"])
		})
	}
}

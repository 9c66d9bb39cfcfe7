package batonprom_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
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

package baton_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// fetchesByQueue counts the JobFetch calls of each queue.
type fetchesByQueue struct {
	batondriver.JobDriver
	mu sync.Mutex
	n  map[string]int
}

func (d *fetchesByQueue) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	d.mu.Lock()
	d.n[p.Queue]++
	d.mu.Unlock()
	return d.JobDriver.JobFetch(ctx, p)
}

func (d *fetchesByQueue) count(queue string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[queue]
}

// Seed S7 end to end: a queue of the highest priority whose jobs are all
// parked — one key halted, another busy with a job that does not return —
// holds up neither the lower queue's jobs, which all run at once, nor the
// backend: no fetch loop spins on it while its jobs wait.
func TestParkedQueueStarvesNoOther(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		d := &fetchesByQueue{JobDriver: newJobDriver(t), n: map[string]int{}}
		gate := make(chan struct{})
		defer close(gate)
		var lo sync.WaitGroup
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			select {
			case <-gate:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}), &baton.WorkerOpts{Queue: "hi", Concurrency: byCustomer(1)})
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
			lo.Done()
			return nil
		}), &baton.WorkerOpts{Queue: "lo"})
		c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 2, StrictPriority: true, Logger: quiet,
			Queues: []baton.QueueConfig{{Name: "hi"}, {Name: "lo"}}, PollInterval: time.Second})
		require.NoError(t, err)
		ctx := t.Context()
		_, err = c.SetLimit(ctx, "hi", "customer:halted", 0)
		require.NoError(t, err)
		for i := range 30 {
			for _, customer := range []string{"halted", "busy"} {
				_, err := c.Insert(ctx, webhookArgs{Customer: customer, N: i}, nil)
				require.NoError(t, err)
			}
		}
		lo.Add(20)
		for range 20 {
			_, err := c.Insert(ctx, emailArgs{To: "lo"}, nil)
			require.NoError(t, err)
		}
		started := time.Now()
		start(t, c)
		ran := make(chan struct{})
		go func() { lo.Wait(); close(ran) }()
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("the lower queue's jobs did not all run beside the parked ones")
		}
		t.Logf("the lower queue's 20 jobs ran in %v", time.Since(started).Round(time.Millisecond))

		busy, err := c.KeyGet(ctx, "hi", "customer:busy")
		require.NoError(t, err)
		require.Equal(t, 1, busy.Holding, "the busy key's holder")
		require.Equal(t, 29, busy.Chained+busy.Parked, "the rest wait, one maybe chained behind the holder")
		halted, err := c.KeyGet(ctx, "hi", "customer:halted")
		require.NoError(t, err)
		require.Equal(t, 30, halted.Parked)
		require.Zero(t, halted.Holding)
		// Quiet now: the parked jobs cost the poll at most.
		time.Sleep(100 * time.Millisecond)
		before := d.count("hi")
		time.Sleep(1500 * time.Millisecond)
		quiet := d.count("hi") - before
		t.Logf("fetches of the parked queue in 1.5s of quiet: %d", quiet)
		require.LessOrEqual(t, quiet, 6, "fetches of the parked queue in 1.5s of quiet (poll interval 1s; a spinning loop makes hundreds)")
	})
}

// The default key of a job with no Key func is its kind and its args'
// JSON, and past 200 bytes the kind and a SHA-256 of that JSON: equal args
// still share a key, other args do not.
func TestDefaultKeyHashedPastLimit(t *testing.T) {
	t.Parallel()
	c, err := baton.NewClient(batonmem.New(), &baton.Config{Logger: quiet})
	require.NoError(t, err)
	opts := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{OnBusy: baton.OnBusyDrop}}
	insert := func(args webhookArgs) *baton.JobRow {
		t.Helper()
		res, err := c.Insert(t.Context(), args, opts)
		require.NoError(t, err)
		return res.Job
	}
	encoded := func(args webhookArgs) []byte {
		b, err := json.Marshal(args)
		require.NoError(t, err)
		return b
	}

	at200 := webhookArgs{Customer: strings.Repeat("a", 179)}
	require.Len(t, encoded(at200), 200)
	require.Equal(t, "webhook:"+string(encoded(at200)), insert(at200).Key, "200 bytes: the JSON itself")

	long := webhookArgs{Customer: strings.Repeat("b", 180)}
	sum := sha256.Sum256(encoded(long))
	first := insert(long)
	require.Equal(t, "webhook:sha256:"+hex.EncodeToString(sum[:]), first.Key, "201 bytes: hashed")
	require.Equal(t, baton.JobStateAvailable, first.State)
	twin := insert(long)
	require.Equal(t, first.Key, twin.Key, "equal args, one key")
	require.Equal(t, baton.JobStateDropped, twin.State, "its twin holds the key")
	other := insert(webhookArgs{Customer: long.Customer, N: 1})
	require.NotEqual(t, first.Key, other.Key)
	require.Equal(t, baton.JobStateAvailable, other.State)
}

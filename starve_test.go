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

// Weighted queues share a client's workers in proportion to their weights
// while both have work: with weights 3 and 1 and one worker, about three
// jobs of the first run for each of the second.
func TestWeightedQueuesShareWorkers(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var mu sync.Mutex
		var order []string
		done := make(chan struct{})
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, job.Queue)
			if len(order) == 800 {
				close(done)
			}
			return nil
		}), nil)
		c, err := baton.NewClient(newJobDriver(t), &baton.Config{Workers: workers, Concurrency: 1, Logger: quiet,
			Queues: []baton.QueueConfig{{Name: "heavy", Weight: 3}, {Name: "light", Weight: 1}}})
		require.NoError(t, err)
		for _, q := range []string{"heavy", "light"} {
			batch := make([]*baton.InsertManyParams, 400)
			for i := range batch {
				batch[i] = &baton.InsertManyParams{Args: emailArgs{To: q}, Opts: &baton.InsertOpts{Queue: q}}
			}
			_, err := c.InsertMany(t.Context(), batch)
			require.NoError(t, err)
		}
		start(t, c)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("the 800 jobs did not all run")
		}
		mu.Lock()
		defer mu.Unlock()
		heavy := 0
		for _, q := range order[:400] {
			if q == "heavy" {
				heavy++
			}
		}
		t.Logf("of the first 400 jobs run, %d were of the queue of weight 3 (300 expected)", heavy)
		require.InDelta(t, 300, heavy, 40, "a 3:1 share, within 4.6 standard deviations")
	})
}

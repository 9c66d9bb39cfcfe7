package baton_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// queueWaits counts the JobWait calls on one queue in progress.
type queueWaits struct {
	batondriver.JobDriver
	queue   string
	waiting atomic.Int64
}

func (d *queueWaits) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	if p.Queue == d.queue {
		d.waiting.Add(1)
		defer d.waiting.Add(-1)
	}
	return d.JobDriver.JobWait(ctx, p)
}

// A queue with MaxWorkers runs at most that many of its jobs at once,
// first in strict priority though it is: the other workers go to the
// queue after it, and it takes no insert's wake-up while it has its share.
// As its workers free, its backlog runs on without waiting for the poll.
func TestMaxWorkersCapsQueue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		const capped, share = "capped", 2
		d := &queueWaits{JobDriver: newJobDriver(t), queue: capped}
		var mu sync.Mutex
		var inCapped, most, otherDone, cappedDone int
		release := make(chan struct{})
		w := baton.NewWorkers()
		baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			mu.Lock()
			if job.Queue != capped {
				otherDone++
				mu.Unlock()
				return nil
			}
			inCapped++
			most = max(most, inCapped)
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done(): // Stop, after a failure
			}
			mu.Lock()
			inCapped--
			cappedDone++
			mu.Unlock()
			return nil
		}), nil)
		c, err := baton.NewClient(d, &baton.Config{
			Workers: w, Concurrency: 8, StrictPriority: true, Logger: quiet, PollInterval: time.Minute,
			Queues: []baton.QueueConfig{{Name: capped, MaxWorkers: share}, {Name: "other"}},
		})
		require.NoError(t, err)
		ctx := context.Background()
		for range 12 {
			_, err := c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: capped})
			require.NoError(t, err)
		}
		start(t, c)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return inCapped == share }, 5*time.Second, time.Millisecond)
		for range 4 {
			_, err := c.Insert(ctx, emailArgs{}, &baton.InsertOpts{Queue: "other"})
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return otherDone == 4 }, 5*time.Second, time.Millisecond,
			"the other queue's jobs ran beside the capped queue's backlog")
		require.Eventually(t, func() bool { return d.waiting.Load() == 0 }, 5*time.Second, time.Millisecond,
			"a wait for the capped queue's inserts is over once it has its share")
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		require.Equal(t, share, most, "most of the capped queue's jobs at once")
		require.Zero(t, cappedDone)
		mu.Unlock()
		require.Zero(t, d.waiting.Load(), "the capped queue took a wake-up while it had its share")

		close(release)
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return cappedDone == 12 }, 5*time.Second, time.Millisecond,
			"the backlog ran on as workers freed, not at the poll")
		mu.Lock()
		require.Equal(t, share, most)
		mu.Unlock()
	})
}

func TestMaxWorkersNegative(t *testing.T) {
	_, err := baton.NewClient(newJobDriver(t), &baton.Config{Queues: []baton.QueueConfig{{Name: "q", MaxWorkers: -1}}})
	require.ErrorContains(t, err, `queue "q" has negative MaxWorkers -1`)
}

// A queue that has its whole share stops waiting for its inserts' wake-ups
// (JobWait hands each to one waiter in the whole system: another process
// may run the job), also when a fetch the wake-up did not bring fills it,
// as the one that admits a scheduled job and leases it.
func TestMaxWorkersTakesNoWakeupWhileFull(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		const capped = "capped"
		d := &queueWaits{JobDriver: newJobDriver(t), queue: capped}
		started, done := make(chan struct{}, 1), make(chan struct{})
		w := baton.NewWorkers()
		baton.AddWorker(w, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			started <- struct{}{}
			<-done
			return nil
		}), nil)
		c, err := baton.NewClient(d, &baton.Config{
			Workers: w, Concurrency: 4, Logger: quiet, PollInterval: time.Minute,
			Queues: []baton.QueueConfig{{Name: capped, MaxWorkers: 1}},
		})
		require.NoError(t, err)
		start(t, c)
		t.Cleanup(func() { close(done) }) // before Stop
		_, err = c.Insert(context.Background(), emailArgs{}, &baton.InsertOpts{Queue: capped, Delay: 200 * time.Millisecond})
		require.NoError(t, err)
		require.Eventually(t, func() bool { return d.waiting.Load() == 1 }, 5*time.Second, time.Millisecond,
			"the queue waits for its inserts while it has room")
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the scheduled job did not start")
		}
		require.Eventually(t, func() bool { return d.waiting.Load() == 0 }, time.Second, time.Millisecond,
			"the queue still waits for its inserts with its whole share")
	})
}

// A queue working alone with its whole share, its workers handed their
// next jobs by the finishes (which do no upkeep), still has its upkeep
// fetches, as a full pool has: a job scheduled in it is admitted when it
// comes due, not once the backlog has drained.
func TestMaxWorkersFullQueueKeepsUpkeep(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		var begun atomic.Int64
		due := make(chan int64, 1)
		w := baton.NewWorkers()
		baton.AddWorker(w, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			if job.Args.N < 0 {
				due <- begun.Load()
				return nil
			}
			begun.Add(1)
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}), nil)
		d := &fetchesByQueue{JobDriver: newJobDriver(t), n: map[string]int{}}
		c, err := baton.NewClient(d, &baton.Config{
			Workers: w, Concurrency: 2, Logger: quiet, PollInterval: time.Minute,
			Queues: []baton.QueueConfig{{Name: "s", MaxWorkers: 1}},
		})
		require.NoError(t, err)
		ctx := context.Background()
		const backlog = 150
		jobs := make([]*baton.InsertManyParams, backlog)
		for i := range jobs {
			jobs[i] = &baton.InsertManyParams{Args: webhookArgs{N: i}, Opts: &baton.InsertOpts{Queue: "s", Priority: 5}}
		}
		_, err = c.InsertMany(ctx, jobs)
		require.NoError(t, err)
		_, err = c.Insert(ctx, webhookArgs{N: -1}, &baton.InsertOpts{Queue: "s", Delay: 200 * time.Millisecond})
		require.NoError(t, err)
		start(t, c)
		n := recv(t, due, "the scheduled job's start")
		require.Less(t, n, int64(backlog/2), "the scheduled job waited for the backlog to drain")
		t.Logf("%d fetches of the queue for %d jobs", d.count("s"), n)
	})
}

// A queue with its whole share is fetched for its upkeep only when that is
// due — its next scheduled job, or the poll — not at every round that
// another queue's workers make: while a capped queue's one job runs a
// while beside 2,000 quick jobs of another queue, the capped queue is
// fetched no more than a few times (hundreds, when every round did).
func TestMaxWorkersFullQueueFetchedWhenDue(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		t.Parallel()
		var quick atomic.Int64
		release := make(chan struct{})
		defer close(release)
		w := baton.NewWorkers()
		baton.AddWorker(w, baton.WorkFunc[webhookArgs](func(ctx context.Context, job *baton.Job[webhookArgs]) error {
			if job.Queue == "capped" { // runs until the other queue's jobs are done
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}
			quick.Add(1)
			return nil
		}), nil)
		d := &fetchesByQueue{JobDriver: newJobDriver(t), n: map[string]int{}}
		c, err := baton.NewClient(d, &baton.Config{Workers: w, Concurrency: 4, Logger: quiet, PollInterval: time.Minute,
			Queues: []baton.QueueConfig{{Name: "capped", MaxWorkers: 1}, {Name: "busy"}}})
		require.NoError(t, err)
		ctx := context.Background()
		_, err = c.Insert(ctx, webhookArgs{}, &baton.InsertOpts{Queue: "capped"})
		require.NoError(t, err)
		jobs := make([]*baton.InsertManyParams, 2000)
		for i := range jobs {
			jobs[i] = &baton.InsertManyParams{Args: webhookArgs{N: i}, Opts: &baton.InsertOpts{Queue: "busy"}}
		}
		_, err = c.InsertMany(ctx, jobs)
		require.NoError(t, err)
		start(t, c)
		require.Eventually(t, func() bool { return quick.Load() == 2000 }, 10*time.Second, time.Millisecond)
		n := d.count("capped")
		t.Logf("the capped queue was fetched %d times beside %d fetches of the other", n, d.count("busy"))
		require.LessOrEqual(t, n, 5)
	})
}

package baton_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/redistest"
)

// sentinelDriver returns a Redis driver whose client finds its master
// through the Sentinel at addr, both closed with the test.
func sentinelDriver(t *testing.T, addr string) *batonredis.Driver {
	t.Helper()
	client, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress: []string{addr},
		Sentinel:    rueidis.SentinelOption{MasterSet: redistest.MasterSet},
	})
	require.NoError(t, err)
	t.Cleanup(client.Close)
	d, err := batonredis.New(client, nil)
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// failoverInsert is one insert of TestSentinelFailoverJobs: when it was
// sent, when it returned, and the job's ID if it was acknowledged.
type failoverInsert struct {
	sent, returned time.Time
	id             string
	err            error
}

// TestSentinelFailoverJobs kills the master of a Sentinel-managed pair
// while a client inserts a stream of jobs and works them. The replica
// replicates through a proxy, so the test knows which acknowledged inserts
// reached it: those acknowledged before Synced did; those sent during the
// proxy's partition did not (the proxy drops what it held when the master
// dies). After the failover, with nobody touching the client, inserts
// succeed again, the workers carry on, and every replicated job and every
// job inserted after the kill completes on the new master. The
// unreplicated ones are gone: the test logs them, as the caveat of
// asynchronous replication that docs/locking.md describes.
func TestSentinelFailoverJobs(t *testing.T) {
	t.Parallel()
	master := redistest.StartT(t, nil)
	px := faultproxy.StartT(t, master.Addr())
	replica := redistest.StartT(t, &redistest.Options{ReplicaOf: px.Addr()})
	sentinel := redistest.StartSentinelT(t, master, 1)
	d := sentinelDriver(t, sentinel.Addr())

	var mu sync.Mutex
	runs := map[string]int{} // job ID → handler runs
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		return nil
	}), nil)
	const leaseTTL = 1500 * time.Millisecond
	c, err := baton.NewClient(d, &baton.Config{Workers: workers, Concurrency: 4, LeaseTTL: leaseTTL,
		PollInterval: 100 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	start(t, c)
	t.Cleanup(px.Heal) // before the client stops

	// One insert every 20ms, each given up after a second, until stop:
	// enough jobs to count, little load on the machine beside them.
	stop := make(chan struct{})
	stopInserts := sync.OnceFunc(func() { close(stop) })
	t.Cleanup(stopInserts)
	inserted := make(chan []failoverInsert, 1)
	go func() {
		var ins []failoverInsert
		defer func() { inserted <- ins }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			in := failoverInsert{sent: time.Now()}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			res, err := c.Insert(ctx, emailArgs{To: fmt.Sprint(i)}, nil)
			cancel()
			in.returned = time.Now()
			if err == nil {
				in.id = res.Job.ID
			}
			in.err = err
			ins = append(ins, in)
		}
	}()

	time.Sleep(300 * time.Millisecond)
	addr, err := sentinel.SentinelMaster()
	require.NoError(t, err)
	require.Equal(t, master.Addr(), addr, "the Sentinel failed the master over before the test did")
	syncedAt := time.Now()
	require.NoError(t, replica.Synced())
	px.Partition()
	partitionedAt := time.Now()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, master.Kill())
	killedAt := time.Now()
	px.Cut() // the held replication stream is lost with the master
	px.Heal()

	// Inserts succeed again once the client follows the Sentinel to the
	// new master; a little longer, then stop.
	var ins []failoverInsert
	deadline := time.After(15 * time.Second)
	var resumedAt time.Time
	for resumedAt.IsZero() {
		select {
		case <-deadline:
			require.FailNow(t, "no insert succeeded within 15s of the kill")
		case <-time.After(20 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := c.Insert(ctx, emailArgs{To: "probe"}, nil)
		cancel()
		if err == nil {
			resumedAt = time.Now()
		}
	}
	addr, err = sentinel.SentinelMaster()
	require.NoError(t, err)
	require.Equal(t, replica.Addr(), addr)
	time.Sleep(300 * time.Millisecond)
	stopInserts()
	ins = <-inserted

	// Sort the acknowledged inserts by what the new master must have.
	var replicated, unreplicated, after, unsure []string
	var failed []error
	for _, in := range ins {
		switch {
		case in.id == "":
			failed = append(failed, in.err)
		case in.returned.Before(syncedAt):
			replicated = append(replicated, in.id)
		case in.sent.After(partitionedAt) && in.returned.Before(killedAt):
			unreplicated = append(unreplicated, in.id)
		case in.sent.After(killedAt):
			after = append(after, in.id)
		default: // sent before the partition or returned after the kill
			unsure = append(unsure, in.id)
		}
	}
	require.NotEmpty(t, replicated)
	require.NotEmpty(t, unreplicated)
	require.NotEmpty(t, after)

	// Every job the new master has completes; the workers carry on alone.
	ctx := context.Background()
	state := func(id string) baton.JobState {
		row, err := c.JobGet(ctx, "default", id)
		if errors.Is(err, baton.ErrJobNotFound) {
			return ""
		}
		require.NoError(t, err)
		return row.State
	}
	for _, id := range append(replicated, after...) {
		require.Eventuallyf(t, func() bool { return state(id) == baton.JobStateCompleted }, 3*leaseTTL+5*time.Second,
			10*time.Millisecond, "job %s acknowledged and on the new master: not completed (%q)", id, state(id))
	}
	gone, ranAndGone := 0, 0
	mu.Lock()
	for _, id := range unreplicated {
		if state(id) == "" {
			gone++
			if runs[id] > 0 {
				ranAndGone++
			}
		}
	}
	unsureGone := 0
	for _, id := range unsure {
		if state(id) == "" {
			unsureGone++
		}
	}
	twice := 0
	for _, n := range runs {
		if n > 1 {
			twice++
		}
	}
	mu.Unlock()
	t.Logf("failover: inserts failed for %v after the kill (%d inserts failed)", resumedAt.Sub(killedAt), len(failed))
	if len(failed) > 0 {
		t.Logf("first failure: %v; last: %v", failed[0], failed[len(failed)-1])
	}
	t.Logf("%d replicated and %d inserted after the kill: all completed on the new master; %d ran more than once (completed on the old master after the sync, so again on the new one)",
		len(replicated), len(after), twice)
	t.Logf("%d acknowledged while unreplicated: %d gone from the new master (%d of them had run); of %d acknowledged around the partition or the kill, %d gone",
		len(unreplicated), gone, ranAndGone, len(unsure), unsureGone)
	require.Equal(t, len(unreplicated), gone, "an insert acknowledged during the partition is on the new master")
}

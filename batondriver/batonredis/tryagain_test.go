package batonredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// TestTryAgainUntilTheSlotSettles leaves a queue's slot half moved (the
// first two steps of a reshard: IMPORTING on one master, MIGRATING on the
// one that has its keys) and checks what a job call then does: it is
// refused with TRYAGAIN, sent again until its deadline, and fails then with
// the TRYAGAIN; a call still waiting when the move is called off (SETSLOT
// STABLE) goes through. Without the resend (rueidis resends TRYAGAIN only
// for read-only commands) the first call fails at once, the second too:
// shown by disabling afterTryAgain's loop.
func TestTryAgainUntilTheSlotSettles(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterT(t)
	d := newDriver(t, newClient(t, cluster.Addrs()...))
	const queue = "moving"
	insertJobs(t, d, queue, newJob("k", 1))
	slot, err := cluster.Slot("{" + queue + "}")
	require.NoError(t, err)
	callOff := halfMoveSlot(t, cluster, slot)
	insert := func(ctx context.Context) error {
		_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: queue, Jobs: []*batondriver.JobInsert{newJob("k", 1)}})
		return err
	}

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	began := time.Now()
	err = insert(ctx)
	cancel()
	require.ErrorContains(t, err, "TRYAGAIN")
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "given up before its deadline")
	require.Less(t, time.Since(began), 2*time.Second, "not given up at its deadline")

	// Called off while a call waits: the call goes through.
	done := make(chan error, 1)
	began = time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		done <- insert(ctx)
	}()
	time.Sleep(300 * time.Millisecond)
	callOff()
	require.NoError(t, <-done)
	t.Logf("the insert waited %v for the move to be called off", time.Since(began))
	require.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond)
	stats, err := d.QueueStats(t.Context(), &batondriver.QueueParams{Queue: queue})
	require.NoError(t, err)
	require.Equal(t, 2, stats.Counts[batondriver.JobStateAvailable], "the refused insert stored a job")
}

// TestTryAgainGivesUpWithoutADeadline: a call whose context has no
// deadline is not held for good by a slot that stays half moved: the
// resends stop after tryAgainLimit, and the call fails with the TRYAGAIN.
// Not parallel: it shortens tryAgainLimit, which parallel tests read.
func TestTryAgainGivesUpWithoutADeadline(t *testing.T) {
	limit := tryAgainLimit
	tryAgainLimit = 300 * time.Millisecond
	defer func() { tryAgainLimit = limit }()
	cluster := redistest.StartClusterT(t)
	d := newDriver(t, newClient(t, cluster.Addrs()...))
	const queue = "stuck"
	insertJobs(t, d, queue, newJob("k", 1))
	slot, err := cluster.Slot("{" + queue + "}")
	require.NoError(t, err)
	defer halfMoveSlot(t, cluster, slot)()
	began := time.Now()
	_, err = d.JobInsert(context.Background(), &batondriver.JobInsertParams{Queue: queue, Jobs: []*batondriver.JobInsert{newJob("k", 1)}})
	require.ErrorContains(t, err, "TRYAGAIN")
	require.GreaterOrEqual(t, time.Since(began), tryAgainLimit, "given up before the limit")
	require.Less(t, time.Since(began), tryAgainLimit+2*time.Second, "not given up at the limit")
}

// halfMoveSlot leaves slot half moved, with the first two steps of a
// reshard: IMPORTING on another master, MIGRATING on the one that serves
// it and has its keys, none moved yet. It returns the function that calls
// the move off (SETSLOT STABLE on both).
func halfMoveSlot(t *testing.T, cluster *redistest.Cluster, slot int) (callOff func()) {
	from, err := cluster.Master(slot)
	require.NoError(t, err)
	var to *redistest.Server
	for _, s := range []int{0, 8192, 16383} {
		if m, err := cluster.Master(s); err == nil && m != from {
			to = m
		}
	}
	require.NotNil(t, to)
	node := func(s *redistest.Server) rueidis.Client {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	src, dst := node(from), node(to)
	id := func(c rueidis.Client) string {
		v, err := c.Do(t.Context(), c.B().ClusterMyid().Build()).ToString()
		require.NoError(t, err)
		return v
	}
	fromID, toID := id(src), id(dst)
	require.NoError(t, dst.Do(t.Context(), dst.B().ClusterSetslot().Slot(int64(slot)).Importing().NodeId(fromID).Build()).Error())
	require.NoError(t, src.Do(t.Context(), src.B().ClusterSetslot().Slot(int64(slot)).Migrating().NodeId(toID).Build()).Error())
	return func() {
		for _, c := range []rueidis.Client{src, dst} {
			require.NoError(t, c.Do(t.Context(), c.B().ClusterSetslot().Slot(int64(slot)).Stable().Build()).Error())
		}
	}
}

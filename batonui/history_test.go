package batonui

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
)

func stats(queue string, completed, dead, cancelled int) *baton.QueueStats {
	return &baton.QueueStats{Queue: queue, Counts: map[baton.JobState]int{
		baton.JobStateCompleted: completed, baton.JobStateDead: dead, baton.JobStateCancelled: cancelled,
	}}
}

func TestHistory(t *testing.T) {
	t.Parallel()
	var h history
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

	require.True(t, h.summary(t0).Since.IsZero())
	require.True(t, h.due(t0))
	require.False(t, h.due(t0), "one sample at a time")
	h.add(t0, []*baton.QueueStats{stats("a", 10, 1, 0)})
	require.False(t, h.due(t0.Add(5*time.Second)), "not due before sampleEvery")

	require.True(t, h.due(t0.Add(10*time.Second)))
	h.add(t0.Add(10*time.Second), []*baton.QueueStats{stats("a", 15, 1, 1), stats("b", 3, 0, 0)})
	require.True(t, h.due(t0.Add(20*time.Second)))
	// A sweep lowered a's completed count: it counts as none, not negative.
	h.add(t0.Add(20*time.Second), []*baton.QueueStats{stats("a", 2, 4, 1), stats("b", 3, 0, 0)})

	s := h.summary(t0.Add(30 * time.Second))
	require.Equal(t, t0, s.Since)
	require.False(t, s.Holes)
	require.Equal(t, finished{Completed: 5, Failed: 4}, s.Queues["a"])
	require.Equal(t, finished{Completed: 3}, s.Queues["b"], "a queue new since the last sample had nothing then")
	require.Equal(t, finished{Completed: 8, Failed: 4}, s.Total)
	last := s.Buckets[len(s.Buckets)-1]
	require.True(t, last.Measured)
	require.Equal(t, 8, last.Completed)
	require.False(t, s.Buckets[0].Measured)

	// Nobody watched for ten minutes: that change is a hole, not a spike.
	t1 := t0.Add(10*time.Minute + 20*time.Second)
	require.True(t, h.due(t1))
	h.add(t1, []*baton.QueueStats{stats("a", 500, 4, 1)})
	s = h.summary(t1)
	require.True(t, s.Holes)
	require.Equal(t, 8, s.Total.Completed)

	// An hour later the early samples are gone, and the ring stays small.
	for at := t1.Add(sampleEvery); at.Before(t1.Add(2 * time.Hour)); at = at.Add(sampleEvery) {
		require.True(t, h.due(at))
		h.add(at, []*baton.QueueStats{stats("a", 500, 4, 1)})
	}
	require.LessOrEqual(t, len(h.samples), int(historyWindow/sampleEvery)+2)
	s = h.summary(t1.Add(2 * time.Hour))
	require.False(t, s.Holes)
	require.Equal(t, finished{}, s.Total)

	// A sample out of order is dropped.
	h.abandon()
	n := len(h.samples)
	h.add(t0, nil)
	require.Len(t, h.samples, n)
}

func TestChartScales(t *testing.T) {
	t.Parallel()
	b := make([]bucket, 60)
	b[10] = bucket{Measured: true, finished: finished{Completed: 100, Failed: 20}}
	b[11] = bucket{Measured: true, finished: finished{Completed: 1}}
	c := newChart(b)
	require.Equal(t, 120, c.Max)
	require.Equal(t, c.Height, c.Bars[10].OkH+c.Bars[10].FailH)
	require.Equal(t, 0, c.Bars[10].FailY)
	require.Equal(t, 1, c.Bars[11].OkH, "a small count still shows")
	require.Zero(t, c.Bars[12].OkH)
}

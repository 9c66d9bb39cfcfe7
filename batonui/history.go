package batonui

import (
	"sync"
	"time"

	"github.com/batonhq/baton"
)

// Baton keeps no history of throughput, so the dashboard measures it
// itself: it samples the counts of finished jobs of every queue while its
// pages are served, at most every sampleEvery, and keeps the last hour in
// memory. A job that completed between two samples raised the completed
// count; one that died raised the dead or cancelled count. The figures are
// estimates: retention sweeps and deletions lower the counts (a negative
// change counts as none), completed jobs are not seen at all when the
// clients keep none (a negative CompletedRetention), and there is no
// history from before this process served its first page or from while
// nobody had a page open.
const (
	sampleEvery   = 10 * time.Second
	historyWindow = time.Hour
	// maxSampleGap is the longest gap between two samples whose difference
	// is counted; a longer one (nobody watched) is a hole in the history.
	maxSampleGap = 2 * time.Minute
	bucketWidth  = time.Minute
)

// finished counts a queue's jobs in the end states, as sampled.
type finished struct {
	Completed int
	Failed    int // dead and cancelled
}

type sample struct {
	at     time.Time
	queues map[string]finished
}

// history is the ring of samples, oldest first.
type history struct {
	mu       sync.Mutex
	samples  []sample
	sampling bool // a sample is being taken
}

// due reports whether a new sample should be taken at now, and if so
// claims it: the caller must call add or abandon.
func (h *history) due(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sampling {
		return false
	}
	if n := len(h.samples); n > 0 && now.Sub(h.samples[n-1].at) < sampleEvery {
		return false
	}
	h.sampling = true
	return true
}

// abandon gives up a claimed sample.
func (h *history) abandon() {
	h.mu.Lock()
	h.sampling = false
	h.mu.Unlock()
}

// add records the counts of every queue at now and ends a claimed sample.
func (h *history) add(now time.Time, stats []*baton.QueueStats) {
	s := sample{at: now, queues: make(map[string]finished, len(stats))}
	for _, st := range stats {
		s.queues[st.Queue] = finished{
			Completed: st.Counts[baton.JobStateCompleted],
			Failed:    st.Counts[baton.JobStateDead] + st.Counts[baton.JobStateCancelled],
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sampling = false
	if n := len(h.samples); n > 0 && !now.After(h.samples[n-1].at) {
		return // out of order; keep the ring sorted
	}
	h.samples = append(h.samples, s)
	// Keep what the last hour's first pair may need, and no more.
	keep := 0
	for keep < len(h.samples)-1 && now.Sub(h.samples[keep+1].at) > historyWindow {
		keep++
	}
	h.samples = append(h.samples[:0], h.samples[keep:]...)
}

// bucket is one minute of the throughput chart.
type bucket struct {
	Start    time.Time
	Measured bool // some counted pair of samples ended in it
	finished
}

// throughput is what the history says about the last hour.
type throughput struct {
	Buckets []bucket // oldest first
	// Queues are the last hour's totals by queue, from the pairs counted.
	Queues map[string]finished
	Total  finished
	// Since is the first sample of the hour; zero when there are fewer
	// than two samples.
	Since time.Time
	// Holes reports that some gaps were too long to count.
	Holes bool
}

// summary adds up the changes between consecutive samples over the hour
// before now, by minute.
func (h *history) summary(now time.Time) *throughput {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := int(historyWindow / bucketWidth)
	start := now.Add(-historyWindow)
	t := &throughput{Buckets: make([]bucket, n), Queues: map[string]finished{}}
	for i := range t.Buckets {
		t.Buckets[i].Start = start.Add(time.Duration(i) * bucketWidth)
	}
	for i := 1; i < len(h.samples); i++ {
		a, b := h.samples[i-1], h.samples[i]
		if !b.at.After(start) || b.at.After(now) {
			continue
		}
		if t.Since.IsZero() {
			t.Since = a.at
		}
		if b.at.Sub(a.at) > maxSampleGap {
			t.Holes = true
			continue
		}
		k := min(int(b.at.Sub(start)/bucketWidth), n-1)
		bk := &t.Buckets[k]
		bk.Measured = true
		for q, fb := range b.queues {
			fa := a.queues[q] // a queue new since a had none then
			d := finished{Completed: max(fb.Completed-fa.Completed, 0), Failed: max(fb.Failed-fa.Failed, 0)}
			bk.Completed += d.Completed
			bk.Failed += d.Failed
			tq := t.Queues[q]
			tq.Completed += d.Completed
			tq.Failed += d.Failed
			t.Queues[q] = tq
			t.Total.Completed += d.Completed
			t.Total.Failed += d.Failed
		}
	}
	return t
}

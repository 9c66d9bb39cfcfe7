package batonprom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton"
)

// queueSource is a client whose queues are read at each scrape.
type queueSource struct {
	client *baton.Client
	queues []string // nil: every queue the backend lists
}

// CollectQueues makes every scrape read the state of queues from client's
// backend: queue_jobs by state, queue_paused, queue_active_keys,
// queue_oldest_available_age_seconds and jobs_dropped_total. With no
// queues it reads every queue that ever had a job (QueueList), at each
// scrape. It may be called again for other clients or queues; a queue
// named twice, or listed by two clients, is reported once, from the first
// of those calls that has it. The client need not be started: an
// insert-only client reads the same backend.
func (m *Metrics) CollectQueues(client *baton.Client, queues ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sources = append(m.sources, &queueSource{client: client, queues: append([]string(nil), queues...)})
}

// scrape is what one read of the queues produced.
type scrape struct {
	metrics []prometheus.Metric
	errs    []error
}

// collectQueues reads the queues of every source, for at most the scrape
// timeout, and sends what it read. A backend that ignores the context's
// deadline cannot hold the scrape: after a grace of a tenth of the timeout
// (at least 250ms) more, the scrape goes on without it, and its late answer
// is thrown away.
func (m *Metrics) collectQueues(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sources := append([]*queueSource(nil), m.sources...)
	m.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	done := make(chan *scrape, 1)
	go func() { done <- m.readQueues(ctx, sources) }()
	guard := time.NewTimer(m.timeout + max(m.timeout/10, 250*time.Millisecond))
	defer guard.Stop()
	var s *scrape
	select {
	case s = <-done:
	case <-guard.C:
		s = &scrape{errs: []error{fmt.Errorf("backend did not answer within %v", m.timeout)}}
	}
	for _, metric := range s.metrics {
		ch <- metric
	}
	if len(s.errs) > 0 {
		m.scrapeErrors.Add(float64(len(s.errs)))
		m.log.Warn("batonprom: reading queue state failed; those queues are left out of this scrape", "err", errors.Join(s.errs...))
	}
	m.scrapeErrors.Collect(ch)
}

// readQueues reads the state of the queues of sources. A queue is reported
// once, from the first source, in the order of CollectQueues's calls, that
// has it: two series with the same labels would fail the whole gather. A
// source that names its queues claims them before reading them, so that a
// failed read leaves a gap rather than another backend's figures under the
// same name; a source that lists every queue claims those it read.
//
// Once ctx is done the scrape is out of time: the reads left are not
// tried, and the timeout is one error, not one per queue or source left.
func (m *Metrics) readQueues(ctx context.Context, sources []*queueSource) *scrape {
	s := &scrape{}
	seen := map[string]bool{}
	for _, src := range sources {
		if len(src.queues) == 0 {
			all, err := src.client.QueueStatsAll(ctx)
			s.errs = append(s.errs, failures(err)...)
			for _, st := range all {
				if !seen[st.Queue] {
					seen[st.Queue] = true
					s.add(m, st.Queue, st)
				}
			}
			if err != nil && ctx.Err() != nil {
				return s
			}
			continue
		}
		for _, q := range src.queues {
			if seen[q] {
				continue
			}
			if err := ctx.Err(); err != nil {
				s.errs = append(s.errs, fmt.Errorf("queue %q and the rest left unread: %w", q, err))
				return s
			}
			seen[q] = true
			st, err := src.client.QueueStats(ctx, q)
			if err != nil {
				s.errs = append(s.errs, err)
				if ctx.Err() != nil {
					return s
				}
				continue
			}
			s.add(m, q, st)
		}
	}
	return s
}

// failures splits an error of QueueStatsAll into one error per failed read:
// it joins those of the queues it could not read.
func failures(err error) []error {
	if err == nil {
		return nil
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		return joined.Unwrap()
	}
	return []error{err}
}

// add converts one queue's stats to metrics.
func (s *scrape) add(m *Metrics, queue string, st *baton.QueueStats) {
	metric := func(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		// Queue names are checked by baton; an error here is a name that
		// a backend made up, reported rather than panicking the scrape.
		c, err := prometheus.NewConstMetric(desc, t, v, labels...)
		if err != nil {
			s.errs = append(s.errs, fmt.Errorf("queue %q: %w", queue, err))
			return
		}
		s.metrics = append(s.metrics, c)
	}
	for _, state := range baton.JobStates {
		metric(m.queueJobs, prometheus.GaugeValue, float64(st.Counts[state]), queue, string(state))
	}
	paused := 0.0
	if st.Paused {
		paused = 1
	}
	metric(m.queuePaused, prometheus.GaugeValue, paused, queue)
	metric(m.queueKeys, prometheus.GaugeValue, float64(st.Keys), queue)
	age := 0.0
	if !st.OldestAvailable.IsZero() {
		age = max(time.Since(st.OldestAvailable).Seconds(), 0)
	}
	metric(m.queueOldest, prometheus.GaugeValue, age, queue)
	metric(m.dropped, prometheus.CounterValue, float64(st.Dropped), queue)
}

package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton"
)

// sample reads the queues' stats and the webhook keys from the backend,
// for the progress and the parked peaks, until ctx ends.
func (r *run) sample(ctx context.Context) {
	t := time.NewTicker(max(r.d(100*time.Millisecond), 20*time.Millisecond))
	defer t.Stop()
	haltKey := fmt.Sprintf("customer:%02d", haltCustomer)
	for {
		stats := map[string]*baton.QueueStats{}
		parked := 0
		for _, q := range queues {
			st, err := r.clients[0].QueueStats(ctx, q)
			if err != nil {
				break
			}
			stats[q] = st
			parked += st.Counts[baton.JobStateParked]
		}
		keys, _, err := r.clients[0].KeyList(ctx, queueWebhooks, &baton.KeyListOpts{Limit: 100})
		halt, busiest, most := "", "", 0
		if err == nil {
			r.backlogs(keys, haltKey)
			for _, k := range keys {
				r.track.sampleParked(k.Key, k.Parked)
				if k.Key == haltKey && k.Override && k.Limit == 0 {
					halt = fmt.Sprintf("%s HALTED: %d running, %d parked", k.Key, k.Running, k.Parked)
				}
				if k.Parked > most {
					busiest, most = fmt.Sprintf("busiest %s: %d/%d running, %d parked", k.Key, k.Running, k.Limit, k.Parked), k.Parked
				}
			}
		}
		r.mu.Lock()
		if len(stats) == len(queues) {
			r.stats = stats
			r.parked = max(r.parked, parked)
		}
		if err == nil {
			r.halt, r.busiest = halt, busiest
		}
		r.mu.Unlock()
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// backlogMin is how many parked jobs make a key's backlog worth telling of
// when it has drained.
const backlogMin = 12

// backlog is a key that had many jobs parked.
type backlog struct {
	since time.Time
	peak  int
}

// backlogs tells of every key whose backlog has drained, from a sample of
// the active keys: a key with no parked job is drained (an idle one is not
// listed at all). The halted key's is told once it runs again.
func (r *run) backlogs(keys []*baton.KeyInfo, haltKey string) {
	parked := map[string]int{}
	for _, k := range keys {
		parked[k.Key] = k.Parked
		if k.Parked >= backlogMin {
			b := r.backlog[k.Key]
			if b == nil {
				b = &backlog{since: time.Now()}
				r.backlog[k.Key] = b
			}
			b.peak = max(b.peak, k.Parked)
		}
	}
	for key, b := range r.backlog {
		if parked[key] == 0 {
			delete(r.backlog, key)
			from := b.since
			if key == haltKey {
				from = r.track.haltRecord().to
			}
			r.screen.event("webhooks: %s has caught up: its backlog of %d drained in %v", key, b.peak, time.Since(from).Round(100*time.Millisecond))
		}
	}
}

// progress gathers what the progress shows.
func (r *run) progress() progress {
	p := progress{
		webhooksTotal: r.webhooksTotal,
		syncTotal:     r.syncTotal,
		digestsQueued: int(r.digestsQueued.Load()),
		ticks:         r.ticks.count(),
	}
	r.mu.Lock()
	p.webhooksDone = r.outcomes["webhook"][baton.JobOutcomeCompleted] + r.outcomes["webhook"][baton.JobOutcomeDead]
	for _, m := range r.outcomes {
		p.retried += m[baton.JobOutcomeRetry]
	}
	p.syncDone = r.outcomes["sync_user"][baton.JobOutcomeCompleted] + r.sync.dropped
	p.syncDropped = r.sync.dropped
	p.digestsDone = r.outcomes["digest"][baton.JobOutcomeCompleted]
	if st := r.stats[queueWebhooks]; st != nil {
		p.webhooksRunning, p.webhooksParked = st.Counts[baton.JobStateRunning], st.Counts[baton.JobStateParked]
	}
	if st := r.stats[queueSync]; st != nil {
		p.syncRunning = st.Counts[baton.JobStateRunning]
	}
	p.charge, p.halt, p.busiest = r.charge, r.halt, r.busiest
	r.mu.Unlock()
	return p
}

// render shows the progress until ctx ends: redrawn ten times a second
// live, else one line every 2s (scaled).
func (r *run) render(ctx context.Context) {
	every := max(r.d(2*time.Second), 200*time.Millisecond)
	if r.screen.live {
		every = 100 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		p := r.progress()
		if r.screen.live {
			r.screen.draw(r.screen.block(p))
		} else {
			r.screen.event("%s", r.screen.line(p))
		}
	}
}

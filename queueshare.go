package baton

import "context"

// queueShare is the part of the pool that a queue with
// QueueConfig.MaxWorkers may take: busy counts the workers running its
// jobs, or handed to the completer to lease its next ones (handoff). The
// runner keeps one per capped queue, guarded by runner.mu.
type queueShare struct {
	max, busy int
	full      context.Context // cancelled while busy >= max
	fullNow   context.CancelFunc
}

// newShares returns the shares of the capped queues of qs.
func newShares(qs []QueueConfig) map[string]*queueShare {
	shares := map[string]*queueShare{}
	for _, q := range qs {
		if q.MaxWorkers > 0 {
			s := &queueShare{max: q.MaxWorkers}
			s.full, s.fullNow = context.WithCancel(context.Background())
			shares[q.Name] = s
		}
	}
	return shares
}

// workersFor returns how many workers are free, and how many of them
// queue may take: as many, unless its share is smaller.
func (r *runner) workersFor(queue string) (free, room int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	free, room = r.free, r.free
	if s := r.shares[queue]; s != nil {
		room = min(room, max(s.max-s.busy, 0))
	}
	return free, room
}

// take counts a freed worker that starts a job of queue. r.mu is held.
func (r *runner) take(queue string) {
	if s := r.shares[queue]; s != nil {
		s.busy++
		if s.busy == s.max {
			s.fullNow()
		}
	}
}

// give counts n workers that ran jobs of queue freed. A queue that had its
// whole share wakes the dispatcher: its jobs waited, and woke nobody.
// r.mu is held.
func (r *runner) give(queue string, n int) {
	s := r.shares[queue]
	if s == nil || n <= 0 {
		return
	}
	if s.busy >= s.max && s.busy-n < s.max {
		s.full, s.fullNow = context.WithCancel(context.Background())
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	s.busy -= n
}

// queueFull returns a context cancelled once queue has its whole share
// (already if it has), or one never cancelled if it has no cap.
func (r *runner) queueFull(queue string) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.shares[queue]; s != nil {
		return s.full
	}
	return context.Background()
}

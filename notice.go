package baton

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// A queue's notices (batondriver.JobDriver.QueueListen) reach every client
// working it: recalls of chained jobs, and cancels of running jobs.
//
// Recalls (docs/concurrency.md, "Chained jobs"). A job chained behind a
// running one is leased already, and starts on that job's worker the
// moment its handler returns, with no call to the backend in between: that
// is the point of chaining. So a limit lowered or a key halted while it
// waits would not stop it. The backend tells the clients instead, and each
// gives back the chained jobs of the key it has not started: they wait at
// the head of the key's parked jobs, and run when the limit lets them. A
// client asks for chains in a queue only while it hears its notices.
//
// Cancels (Client.JobCancel). The heartbeat reports a running job's cancel
// request, within HeartbeatInterval; the notice stops it at once, and a
// job in the reply of a call still out as it comes.

// recallKey names a concurrency key of a queue.
type recallKey struct{ queue, key string }

// recall is a recall heard: chained jobs of its key with a fence no higher
// go back. Kept for recallMemory, for the calls in flight as it came.
type recall struct {
	fence int64
	at    time.Time
}

// recallMemory is how long a recall is kept for the chained jobs that
// calls sent before it bring: no call waits for its reply longer than
// maxLeaseWait.
const recallMemory = 2 * maxLeaseWait

// listen hears queue's notices until Stop begins, and lets the dispatcher
// and the completer ask for chained jobs of the queue while it does.
//
// Each try to listen waits for the backend at most leaseWait, and the
// first one holds up the dispatcher's first fetch (it could chain jobs),
// so that a client started on a reachable backend chains from the start.
func (r *runner) listen(queue string) {
	defer r.loops.Done()
	first := true
	tried := func() {
		if first {
			first = false
			r.listened.Done()
		}
	}
	defer tried() // Stop may begin before the first try
	backoff := 10 * time.Millisecond
	for r.fetchCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(r.fetchCtx, r.leaseWait())
		l, err := r.c.driver.QueueListen(ctx, &batondriver.QueueParams{Queue: queue})
		cancel()
		if err != nil {
			tried()
			if r.fetchCtx.Err() != nil {
				return
			}
			r.log.Warn("baton: cannot listen for the queue's notices; not chaining jobs meanwhile", "queue", queue, "err", err)
			if !r.backOff(&backoff) {
				return
			}
			continue
		}
		r.mu.Lock()
		r.listening[queue] = true
		r.mu.Unlock()
		tried() // after listening is set: the first fetch may chain
		r.hear(queue, l)
		l.Close()
	}
}

// hear acts on l's notices of queue until Stop begins.
func (r *runner) hear(queue string, l batondriver.QueueListener) {
	for {
		select {
		case n := <-l.C():
			if n.Cancel != "" {
				r.cancelRequested(queue, n.Cancel)
			} else {
				r.recall(queue, n)
			}
		case <-r.fetchCtx.Done():
			return
		}
	}
}

// recall gives back the chained jobs n recalls that have not started
// (the ones in calls still in flight are given back as they come: see
// recalled).
func (r *runner) recall(queue string, n batondriver.QueueNotice) {
	now := time.Now()
	var rows []*JobRow
	r.mu.Lock()
	if n.Recheck {
		r.rechecked[queue] = now
	} else {
		for k, rc := range r.recalls {
			if now.Sub(rc.at) > recallMemory {
				delete(r.recalls, k)
			}
		}
		k := recallKey{queue, n.Key}
		r.recalls[k] = recall{fence: max(n.Fence, r.recalls[k].fence), at: now}
	}
	for _, e := range r.running {
		if e.queue == queue && e.next != nil && (n.Recheck || e.next.Key == n.Key && e.next.Fence <= n.Fence) {
			rows = append(rows, e.next)
			e.next = nil
		}
	}
	r.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	// Each goes back to the head of its key's parked jobs: the last
	// leased first, so that they keep the order they were leased in.
	slices.SortFunc(rows, func(a, b *JobRow) int { return cmp.Compare(b.Fence, a.Fence) })
	r.log.Info("baton: the limit of a key was lowered; giving back the jobs chained behind its running ones",
		"queue", queue, "key", n.Key, "jobs", len(rows))
	r.giveBackChained(queue, rows)
}

// giveBackChained gives back rows, chained jobs taken out of their job
// ahead's next, in one call, on a goroutine of its own that Stop waits
// for: the listener goes on hearing notices meanwhile. Until the call is
// recorded the heartbeat renews their leases (recording), as it does an
// outcome's: the job ahead's outcome may hand one its slot first.
func (r *runner) giveBackChained(queue string, rows []*JobRow) {
	back := make([]*batondriver.JobFinish, len(rows))
	for i, row := range rows {
		back[i] = giveBack(row)
	}
	r.giveBackAside(queue, back)
}

// giveBackAside records back, outcomes that give back leased jobs of
// queue unrun, in one call on a goroutine of its own that Stop waits for;
// until it is recorded the heartbeat renews their leases (recording).
// Called by a loop (the listener, the dispatcher), before Stop waits.
func (r *runner) giveBackAside(queue string, back []*batondriver.JobFinish) {
	r.mu.Lock()
	for _, f := range back {
		ctx, cancel := context.WithCancelCause(context.Background())
		row := &JobRow{ID: f.ID, Lease: f.Lease} // all the heartbeat reads
		r.recording[f] = &execution{queue: queue, row: row, ctx: ctx, cancel: cancel, returned: true}
	}
	r.mu.Unlock()
	r.givingBack.Go(func() { r.finish(queue, back, 0, nil, nil) })
}

// recalled reports whether the chained job row, leased by a call of queue
// sent at sent, was recalled since. r.mu is held.
func (r *runner) recalled(queue string, row *JobRow, sent time.Time) bool {
	if at, ok := r.rechecked[queue]; ok && sent.Before(at) {
		return true
	}
	rc, ok := r.recalls[recallKey{queue, row.Key}]
	return ok && row.Fence <= rc.fence
}

// cancelRequested stops the job id of queue, whose cancel an admin
// requested (Client.JobCancel), without waiting for the heartbeat that
// reports it: its handler's context ends with ErrJobCancelled; chained and
// not started, it is given back, and the backend ends it cancelled. A job
// not running here may be in the reply of a call still out: the notice is
// kept for recallMemory, and launch gives the job back if that call was
// sent before the notice came (cancelHeard).
func (r *runner) cancelRequested(queue, id string) {
	var back *JobRow
	k := execKey{queue, id}
	now := time.Now()
	r.mu.Lock()
	e := r.running[k]
	if e != nil && !e.returned {
		e.cancel(ErrJobCancelled)
	}
	for _, a := range r.running {
		if a.queue == queue && a.next != nil && a.next.ID == id {
			back, a.next = a.next, nil
		}
	}
	if e == nil && back == nil {
		for k, at := range r.cancels {
			if now.Sub(at) > recallMemory {
				delete(r.cancels, k)
			}
		}
		r.cancels[k] = now
	}
	r.mu.Unlock()
	if back != nil {
		r.giveBackChained(queue, []*JobRow{back})
	}
}

// cancelHeard reports whether a cancel notice for job id of queue came
// after sent, when the call that leased it was sent: the job was running
// when its cancel was asked for, so under that lease (a notice heard
// before the call was sent is for an earlier run, which an admin's retry
// may have followed). r.mu is held.
func (r *runner) cancelHeard(queue, id string, sent time.Time) bool {
	at, ok := r.cancels[execKey{queue, id}]
	return ok && at.After(sent)
}

package baton

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Single inserts are group-committed per queue. Up to maxInflight insert
// calls to a queue go out at once (the client pipelines them); beyond that,
// concurrent single inserts collect in the next group, and when a call
// returns, the first of that group sends the whole group as one backend
// call. An insert with few others around goes out at once, so grouping
// costs no latency; under load, the backend runs one script per group
// instead of one per job (a script's fixed cost is most of a single
// insert's).

// groupSendTimeout bounds a group's backend call when its sender's context
// has no deadline.
const groupSendTimeout = 30 * time.Second

// maxInflight is how many insert calls to one queue may be in flight before
// single inserts are grouped.
const maxInflight = 4

// queueInserter serialises the groups of one queue.
type queueInserter struct {
	mu       sync.Mutex
	inflight int          // calls in flight
	next     *insertGroup // collecting while maxInflight calls are in flight
}

type insertGroup struct {
	members []groupMember // guarded by queueInserter.mu until sent
	turn    chan struct{} // closed when the group may be sent
	sending bool          // turn closed (guarded by queueInserter.mu)
	sent    bool          // the jobs are taken: no more join, none can leave
	done    chan struct{} // closed when results and err are set
	results []*insertResult
	err     error
}

// groupMember is one caller's job in a group.
type groupMember struct {
	job  *batondriver.JobInsert
	ctx  context.Context // the caller's: its deadline bounds the send
	gone bool            // the caller gave up before the group was sent: left out
}

func (c *Client) queueInserter(queue string) *queueInserter {
	c.insertersMu.Lock()
	defer c.insertersMu.Unlock()
	if c.inserters == nil {
		c.inserters = make(map[string]*queueInserter)
	}
	qi := c.inserters[queue]
	if qi == nil {
		qi = &queueInserter{}
		c.inserters[queue] = qi
	}
	return qi
}

// insertGrouped inserts one job into queue, grouped with concurrent ones.
// Every caller waits at most until its own context ends. A caller whose
// context ends before its group is sent has its job left out of it (also
// if the send comes before the caller has given up); once the
// group's backend call is sent, it goes on for the others (and so may
// insert a caller's job after its context ended, as any call in flight
// may). A caller whose call has returned when its context ends gets the
// call's result: an error would say its job may not have been inserted.
func (c *Client) insertGrouped(ctx context.Context, queue string, job *batondriver.JobInsert) (*insertResult, error) {
	qi := c.queueInserter(queue)
	qi.mu.Lock()
	if qi.inflight < maxInflight {
		qi.inflight++
		qi.mu.Unlock()
		return c.sendAlone(ctx, qi, queue, job)
	}
	g := qi.next
	if g == nil {
		g = &insertGroup{turn: make(chan struct{}), done: make(chan struct{})}
		qi.next = g
	}
	i := len(g.members)
	g.members = append(g.members, groupMember{job: job, ctx: ctx})
	qi.mu.Unlock()
	if i == 0 { // the first of a group sends it when its turn comes
		go func() {
			<-g.turn
			c.sendGroup(ctx, qi, queue, g)
		}()
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		select {
		case <-g.done: // the call has returned too: its result stands
		default:
			// Not sent yet: the job is left out, so that the error means
			// it was not inserted.
			qi.mu.Lock()
			if !g.sent {
				g.members[i].gone = true
			}
			qi.mu.Unlock()
			return nil, fmt.Errorf("baton: insert into %q: %w", queue, context.Cause(ctx))
		}
	}
	if g.members[i].gone {
		// Left out by the send, the context having ended (or its deadline
		// passed) before this caller could give up.
		<-ctx.Done()
		return nil, fmt.Errorf("baton: insert into %q: %w", queue, context.Cause(ctx))
	}
	if g.err != nil {
		return nil, g.err
	}
	return g.results[i], nil
}

// sendAlone inserts the caller's job alone, in the caller's goroutine and
// under its context: nobody else's job is in the call (later callers form
// the next group), so the caller's cancellation ends only its own call,
// and a call that has returned gives its result. The call is over even if
// the driver panics (a caller may recover): else it would be counted in
// flight for ever.
func (c *Client) sendAlone(ctx context.Context, qi *queueInserter, queue string, job *batondriver.JobInsert) (*insertResult, error) {
	defer c.handOn(qi)
	res, err := c.insertBatches(ctx, queue, []*batondriver.JobInsert{job})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

// sendGroup inserts a group (but the jobs of callers whose contexts ended,
// or deadlines passed, before it was sent: they give up, or are about to),
// then hands the queue to the next group or marks it idle. Its
// backend call is not cancelled with the context of the caller who happens
// to send it (ctx gives it its values only); it is bounded by the latest
// deadline of the callers whose jobs it sends, or by groupSendTimeout if
// one of them has none: no caller's deadline fails another's insert.
func (c *Client) sendGroup(ctx context.Context, qi *queueInserter, queue string, g *insertGroup) {
	qi.mu.Lock()
	qi.next = nil // later arrivals form the next group
	g.sent = true
	var jobs []*batondriver.JobInsert
	var index []int // in g.members, of each job sent
	var deadline time.Time
	unbounded := false
	now := time.Now()
	for i := range g.members {
		m := &g.members[i]
		d, bounded := m.ctx.Deadline()
		if !m.gone && (m.ctx.Err() != nil || bounded && !now.Before(d)) {
			m.gone = true // its caller gets its context's error: not sent
		}
		if m.gone {
			continue
		}
		jobs = append(jobs, m.job)
		index = append(index, i)
		if !bounded {
			unbounded = true
		} else if d.After(deadline) {
			deadline = d
		}
	}
	qi.mu.Unlock()
	if len(jobs) > 0 {
		if unbounded {
			deadline = time.Now().Add(groupSendTimeout)
		}
		sctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		results, err := c.insertBatches(sctx, queue, jobs)
		cancel()
		g.err = err
		if err == nil {
			g.results = make([]*insertResult, len(g.members))
			for k, i := range index {
				g.results[i] = results[k]
			}
		}
	}
	close(g.done)
	c.handOn(qi)
}

// handOn hands the queue to the next group, or marks a call finished.
func (c *Client) handOn(qi *queueInserter) {
	qi.mu.Lock()
	if g := qi.next; g != nil && !g.sending {
		g.sending = true // the next group takes this call's place in flight
		close(g.turn)
	} else {
		qi.inflight--
	}
	qi.mu.Unlock()
}

package batonredis

import (
	"context"
	"sync"
	"time"
)

// A fetch leases jobs to whoever reads its reply. If the caller gave up
// waiting (its context ended while the server stalled: a long script, a
// fork, a paused process) the command still runs once the server resumes,
// and the jobs it leases run nowhere: they come back only when their
// leases expire, an attempt counted for each, and a job of one attempt goes
// to the dead set without having run. So a fetch carries the last server
// time at which its caller still waits, and a fetch run later leases
// nothing.
//
// That time is the context's deadline on this process's clock, less a
// moment for the reply to travel back, moved to the server's by the offset
// seen in an earlier reply. The estimate only
// ever errs late: the server read its clock somewhere between the call's
// send and its reply, and the estimate takes the send. A late estimate lets
// a stale fetch lease, as without it; an early one, which the clocks'
// drift over the sample's age can make, costs the caller an empty reply a
// little before it would have given up anyway.

// maxDrift bounds how fast the two clocks may drift apart: 1,000 parts per
// million, ten times what ordinary quartz clocks do.
const maxDrift = 1000

// clockSample is one reply's server time and when its call was sent, by
// this process's monotonic clock.
type clockSample struct {
	sent   time.Time
	rtt    time.Duration
	server int64 // ms
}

// serverClocks keeps a clock sample per queue: on Redis Cluster a queue's
// calls go to the master of its slot, whose clock is its own.
type serverClocks struct {
	mu      sync.Mutex
	samples map[string]clockSample
}

// maxSampleAge is how long the sample with the shortest round trip is kept
// before any later one replaces it.
const maxSampleAge = 10 * time.Second

// observe records the server time of a reply to a call sent at sent and
// received at recv. A sample replaces the queue's one if its round trip was
// no longer, or the old one is over maxSampleAge, or force is set (a call
// was refused as late: the old sample may be wrong, after a failover or a
// clock step on the server).
func (c *serverClocks) observe(queue string, sent, recv time.Time, server int64, force bool) {
	s := clockSample{sent: sent, rtt: recv.Sub(sent), server: server}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.samples[queue]
	if ok && !force && s.rtt > old.rtt && s.sent.Sub(old.sent) < maxSampleAge {
		return
	}
	if c.samples == nil {
		c.samples = make(map[string]clockSample)
	}
	c.samples[queue] = s
}

// replyAllowance is how long before its caller gives up a call must run to
// lease: its reply has yet to reach the caller, through the network and
// the caller's scheduling, which on a loaded machine takes milliseconds.
// A call run later leases nothing, though its caller would still have read
// the reply in time: that costs an empty reply, where the other error
// costs an attempt. It is at most a quarter of the call's wait left, so
// that a short wait still leases.
const replyAllowance = 50 * time.Millisecond

// deadline returns the last server time in ms at which a call to queue's
// server, with context ctx, may run for its reply to reach the caller
// before it gives up; 0 if ctx has no deadline or no sample is known.
func (c *serverClocks) deadline(ctx context.Context, queue string) int64 {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	dl = dl.Add(-min(replyAllowance, max(time.Until(dl), 0)/4))
	c.mu.Lock()
	s, ok := c.samples[queue]
	c.mu.Unlock()
	if !ok {
		return 0
	}
	ahead := dl.Sub(s.sent) // negative if the sample is newer than the deadline
	slack := time.Millisecond + max(ahead, -ahead)/maxDrift
	return s.server + (ahead + slack).Milliseconds()
}

package batonredis

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A call that leases jobs (a fetch, or a finish that fetches or chains)
// can run on the server while its reply never reaches this process: the
// connection is cut after the command went out, or the caller gives up as
// the reply travels. Its jobs would then run nowhere until their leases
// expired, an attempt counted for each, and a job of one attempt would go
// to the dead set without having run.
//
// So each such call names a record key of this driver's, with a nonce, and
// the script writes there what it leased (lua/joblib.lua, write_record).
// When a call fails, the driver keeps it as lost, and its next calls to
// the queue, fetches and finishes alike, settle it in the same script: the
// jobs found in its record still running under its leases are given back
// as if never leased (settle, take_back). A call with no record yet may
// still run, delayed in the network, until the server's clock passes the
// deadline it carried (serverclock.go); it stays lost until then.
//
// Record keys are reused: a call whose reply arrived frees its key for the
// next call, whose nonce tells its record from the one before. So in
// steady state a leasing call costs one SET, and the keys of a process
// number its leasing calls in flight, each expiring two minutes after its
// last leases (RECORD_GRACE in lua/joblib.lua: a settle after the leases
// ran out still finds it).

// recordGrace is how long a record outlives the leases it names
// (RECORD_GRACE in lua/joblib.lua, which writes it): longer than
// minLostWait, so that a lost call settled after its leases ran out still
// has its jobs given back.
const recordGrace = 2 * time.Minute

// maxSettle bounds the lost calls one call settles.
const maxSettle = 16

// minLostWait is how long at least a lost call without a deadline stays
// lost before the driver gives up settling it: a call can arrive that late
// only through a connection that long stalled.
const minLostWait = time.Minute

// leaseRecords keeps, per queue, this driver's record keys and lost calls.
// Its methods are safe for concurrent use.
type leaseRecords struct {
	mu     sync.Mutex
	name   string // random: this driver's part of its record keys
	nonce  uint64
	queues map[string]*queueRecords
}

type queueRecords struct {
	free []string // record keys not in use
	made int      // record keys named so far
	lost []lostCall
}

// lostCall is a leasing call whose reply did not arrive.
type lostCall struct {
	key, nonce string
	waits      int64     // its last server ms to lease (0: none)
	until      time.Time // when to stop settling it
}

// leasingCall is one call's part: its record key and nonce, if it may
// lease, and the lost calls it settles.
type leasingCall struct {
	queue      string
	key, nonce string
	settle     []lostCall
}

// begin starts a call to queue, whose keys start with base: with a record
// if it may lease (record), and with up to maxSettle lost calls to settle.
func (r *leaseRecords) begin(base, queue string, record bool) *leasingCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue(queue)
	c := &leasingCall{queue: queue}
	if record {
		if n := len(q.free); n > 0 {
			c.key, q.free = q.free[n-1], q.free[:n-1]
		} else {
			if r.name == "" {
				var b [8]byte
				_, _ = rand.Read(b[:]) // never fails since Go 1.24
				r.name = base64.RawURLEncoding.EncodeToString(b[:])
			}
			q.made++
			c.key = base + "lease:" + r.name + ":" + strconv.Itoa(q.made)
		}
		r.nonce++
		c.nonce = strconv.FormatUint(r.nonce, 10)
	}
	n := min(len(q.lost), maxSettle)
	c.settle = append([]lostCall(nil), q.lost[:n]...)
	q.lost = q.lost[n:]
	return c
}

func (r *leaseRecords) queue(name string) *queueRecords {
	if r.queues == nil {
		r.queues = make(map[string]*queueRecords)
	}
	q := r.queues[name]
	if q == nil {
		q = &queueRecords{}
		r.queues[name] = q
	}
	return q
}

// lostCalls is how many of the queue's calls are lost and not settled.
func (r *leaseRecords) lostCalls(queue string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.queues[queue]; q != nil {
		return len(q.lost)
	}
	return 0
}

// keys returns the queue's keys followed by the call's record key, if any,
// and the keys of the calls it settles; jobs are job keys to append.
func (c *leasingCall) keys(queue []string, jobs ...string) []string {
	keys := make([]string, 0, len(queue)+1+len(c.settle)+len(jobs))
	keys = append(keys, queue...)
	if c.key != "" {
		keys = append(keys, c.key)
	}
	for _, l := range c.settle {
		keys = append(keys, l.key)
	}
	return append(keys, jobs...)
}

// args returns the script's arguments for the call: its nonce ("" for no
// record) and the calls it settles, "nonce:waits ...".
func (c *leasingCall) args() (nonce, spec string) {
	var b strings.Builder
	for i, l := range c.settle {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(l.nonce)
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(l.waits, 10))
	}
	return c.nonce, b.String()
}

// end ends call c. If it failed (err), it is lost, with the deadline
// waits it carried and leases of ttl, and the calls it was to settle are
// lost still. Else its record key is free again, and of the calls it
// settled, those the script left unsettled (1-based indexes) stay lost
// until their time is up.
func (r *leaseRecords) end(c *leasingCall, err error, unsettled []int64, waits int64, ttl time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q := r.queue(c.queue)
	if err != nil {
		q.lost = append(q.lost, c.settle...)
		if c.key != "" {
			q.lost = append(q.lost, lostCall{key: c.key, nonce: c.nonce, waits: waits,
				until: time.Now().Add(max(ttl, minLostWait))})
		}
		return
	}
	if c.key != "" {
		q.free = append(q.free, c.key)
	}
	keep := make(map[int64]bool, len(unsettled))
	for _, i := range unsettled {
		keep[i] = true
	}
	now := time.Now()
	for i, l := range c.settle {
		if keep[int64(i+1)] && now.Before(l.until) {
			q.lost = append(q.lost, l)
		} else {
			q.free = append(q.free, l.key)
		}
	}
}

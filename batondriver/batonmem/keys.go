package batonmem

import (
	"cmp"
	"container/heap"
	"container/list"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// jobKey is one concurrency key of a queue. The queue keeps it only while
// it is active — has holders, parked jobs or an override — and forgets it
// when it goes idle: its fences come from the queue (queueState.nextFence),
// so nothing of an idle key needs keeping.
type jobKey struct {
	name string
	// dlimit is the Limit of the job last admitted or parked for the key
	// since it became active; -1 before any.
	dlimit   int
	override int
	hasLimit bool // override is set
	// limitFence is the queue's last fencing token when KeySetLimit last
	// set or removed the override (0 if never, since the key became
	// active): a job leased with a fence no higher ran when it changed.
	limitFence int64
	holders    map[string]*job // available and running jobs of the key
	parked     list.List       // of *job, head first
}

// limitFor is the key's limit for admitting j: the override, else j's own.
func (k *jobKey) limitFor(j *job) int {
	if k.hasLimit {
		return k.override
	}
	return j.row.Limit
}

// limit is the key's limit as KeyInfo reports it and as a change of limit
// applies it: the override, else the default.
func (k *jobKey) limit() int {
	if k.hasLimit {
		return k.override
	}
	return k.dlimit
}

func (k *jobKey) active() bool {
	return len(k.holders) > 0 || k.parked.Len() > 0 || k.hasLimit
}

// key returns the queue's key name, creating it. A caller that may leave
// it idle ends with q.forgetIfIdle.
func (q *queueState) key(name string) *jobKey {
	k := q.keys[name]
	if k == nil {
		k = &jobKey{name: name, dlimit: -1, holders: make(map[string]*job)}
		q.keys[name] = k
	}
	return k
}

// forgetIfIdle forgets k if it is idle. Every change that can take away
// k's last holder, parked job or override ends with it. (admit needs none:
// it leaves k holding or parking j, or finds k busy — a job's own limit is
// at least 1, so busy means holders, parked jobs or an override.)
func (q *queueState) forgetIfIdle(k *jobKey) {
	if !k.active() {
		delete(q.keys, k.name)
		k.dlimit = -1 // as KeyInfo reports a forgotten key's default
	}
}

// admission is what admit did with a job.
type admission int

const (
	admitted    admission = iota // available, holding a slot
	parked                       // waiting in its key's parked queue
	dropped                      // ended in state dropped
	rescheduled                  // scheduled BusyDelay later
	refused                      // OnBusyFail: nothing done, the caller decides
)

// admit gives j, in no state and holding no slot, the place of a job that
// wants to be available: available if its key has a free slot and nobody
// parked, else what its OnBusy says if first (this is j's first
// admission), else parked. The caller sets RunAt beforehand.
func (q *queueState) admit(j *job, now time.Time, first bool) admission {
	if j.row.Key == "" {
		q.add(j, batondriver.JobStateAvailable)
		return admitted
	}
	k := q.key(j.row.Key)
	if len(k.holders) < k.limitFor(j) && k.parked.Len() == 0 {
		k.dlimit = j.row.Limit
		j.row.OnBusy = batondriver.OnBusyWait
		q.hold(k, j)
		return admitted
	}
	policy := batondriver.OnBusyWait
	if first {
		policy = j.row.OnBusy
	}
	switch policy {
	case batondriver.OnBusyDrop:
		q.drop(j, k, now)
		return dropped
	case batondriver.OnBusyReschedule:
		j.row.RunAt = now.Add(j.busyDelay)
		q.add(j, batondriver.JobStateScheduled)
		return rescheduled
	case batondriver.OnBusyFail:
		return refused
	}
	k.dlimit = j.row.Limit
	j.row.OnBusy = batondriver.OnBusyWait
	q.park(k, j, now, false)
	return parked
}

// hold makes j available, holding a slot of k, last in arrival order.
func (q *queueState) hold(k *jobKey, j *job) {
	q.add(j, batondriver.JobStateAvailable)
	k.holders[j.row.ID] = j
}

// park puts j in state parked, at the tail of k's parked queue, or at its
// head if front.
func (q *queueState) park(k *jobKey, j *job, now time.Time, front bool) {
	j.row.ParkedAt = now
	q.add(j, batondriver.JobStateParked)
	if front {
		j.parkElem = k.parked.PushFront(j)
	} else {
		j.parkElem = k.parked.PushBack(j)
	}
}

// drop ends j, which found k busy, in state dropped with the reason.
func (q *queueState) drop(j *job, k *jobKey, now time.Time) {
	j.fail(now, fmt.Sprintf("key %q busy: %d holding, limit %d", k.name, len(k.holders), k.limitFor(j)))
	q.end(j, batondriver.JobStateDropped, now)
	q.dropped++
	q.unclaim(j)
}

// release gives back the slot of j, which has just left available or
// running, and promotes the key's parked jobs. It returns how many it
// promoted.
func (q *queueState) release(j *job) int {
	if j.row.Key == "" {
		return 0
	}
	k := q.keys[j.row.Key]
	delete(k.holders, j.row.ID)
	return q.promote(k)
}

// promote makes k's parked jobs available, head first, while the key has
// free slots, each behind every job already available. It returns how many
// it promoted.
func (q *queueState) promote(k *jobKey) int {
	n := 0
	for k.parked.Len() > 0 {
		j := k.parked.Front().Value.(*job)
		if len(k.holders) >= k.limitFor(j) {
			break
		}
		q.remove(j) // also out of k.parked
		q.hold(k, j)
		n++
	}
	q.forgetIfIdle(k)
	return n
}

// demote moves k's available holders beyond its limit, the least urgent
// first and of a priority the last admitted first, to the head of its
// parked queue; running ones keep their slots.
func (q *queueState) demote(k *jobKey, now time.Time) {
	for len(k.holders) > k.limit() {
		var last *job
		for _, j := range k.holders {
			if j.row.State != batondriver.JobStateAvailable {
				continue
			}
			if last == nil || cmp.Or(cmp.Compare(j.row.Priority, last.row.Priority), cmp.Compare(j.seq, last.seq)) > 0 {
				last = j
			}
		}
		if last == nil {
			return
		}
		q.remove(last)
		delete(k.holders, last.row.ID)
		q.park(k, last, now, true)
	}
}

// chain leases behind each job of aheads, in order, the head parked job of
// its key (batondriver.JobFetchParams.Chain), unless the queue is paused,
// and while it has no job available. Only a running keyed job that is not
// chained and has no job chained behind it gets one. Each chained job is
// started (see start) with the next fence, the LeaseUntil of the job ahead
// and After set; it holds no slot, and leaves its key's parked jobs. A job
// left at the head that fits beside the holders under its own default (a
// larger one than the chained job's) is promoted then, as a freed slot
// would promote it: available, it ends the chains, so that no job chained
// later passes it over. It returns the chained jobs in order, and how many
// it promoted.
func (q *queueState) chain(aheads []*job, now time.Time) (out []*job, promoted int) {
	if q.paused {
		return nil, 0
	}
	available := q.states[batondriver.JobStateAvailable]
	for _, h := range aheads {
		if available.Len() > 0 {
			break
		}
		if h.row.Key == "" || h.row.State != batondriver.JobStateRunning || h.row.After != "" || h.next != nil {
			continue
		}
		k := q.keys[h.row.Key] // h holds a slot: the key is active
		if k.parked.Len() == 0 {
			continue
		}
		// The head is chained only if it could be promoted into h's slot:
		// h's own counted, the holders are within the key's limit for it
		// (the override, else its own default, as promote asks). A key
		// over its limit (it was lowered, or halted) chains no more: the
		// holders beyond it finish and hand on nothing.
		c := k.parked.Front().Value.(*job)
		if len(k.holders) > k.limitFor(c) {
			continue
		}
		q.remove(c) // also out of k.parked
		c.row.After = h.row.ID
		c.attemptedBefore = c.row.AttemptedAt
		q.start(c, h.row.LeaseUntil, now)
		h.next = c
		out = append(out, c)
		promoted += q.promote(k)
	}
	return out, promoted
}

// ahead returns the job that j is chained behind, or nil.
func (q *queueState) ahead(j *job) *job {
	if j.row.After == "" {
		return nil
	}
	if h := q.jobs[j.row.After]; h != nil && h.next == j {
		return h
	}
	return nil
}

// leave takes j, whose lease is held, out of running, its lease forgotten,
// and out of its chain. If a job is chained behind j, it takes over j's
// key slot and LeaseUntil and runs on its own from then on: leave returns
// it, and promotes nothing. Else j's slot is freed and its key's parked
// jobs promoted: leave returns how many. A chained j holds no slot: it
// frees none, and the job ahead of it is left with none behind it.
func (q *queueState) leave(j *job) (heir *job, promoted int) {
	heir = q.handOver(j) // before unlease, which forgets j's LeaseUntil
	q.unlease(j)
	if j.row.After != "" {
		if h := q.ahead(j); h != nil {
			h.next = nil
		}
		j.row.After = ""
		return nil, 0
	}
	if heir != nil {
		return heir, 0
	}
	return nil, q.release(j)
}

// handOver gives h's key slot and LeaseUntil to the job chained behind h,
// if any, which leaves the chain, now expiring as any running job, and is
// returned; else it returns nil.
func (q *queueState) handOver(h *job) *job {
	c := h.next
	if c == nil {
		return nil
	}
	h.next = nil
	k := q.keys[h.row.Key]
	delete(k.holders, h.row.ID)
	k.holders[c.row.ID] = c
	c.row.After = ""
	c.row.LeaseUntil = h.row.LeaseUntil
	heap.Fix(q.states[batondriver.JobStateRunning], c.pos[0])
	return c
}

// unchain puts the job chained behind h, if any, back at the head of its
// key's parked jobs, as h's lease expired or h's outcome asked to (the
// chained job will not run): parked since the time it was parked before,
// its attempt not counted and its AttemptedAt that of its last counted
// attempt again, its lease and After cleared, its fence kept, and its
// unique claim given up (running scope: to h, see handClaimBack) or taken
// again if free (queued scope). h keeps its slot: the caller frees it next, which promotes that
// job first. A chained job whose cancel was requested ends cancelled
// instead.
func (q *queueState) unchain(h *job, now time.Time) {
	c := h.next
	if c == nil {
		return
	}
	h.next = nil
	c.row.After = ""
	q.handClaimBack(c, h, now)
	q.unstart(c, now)
	c.row.AttemptedAt = c.attemptedBefore
	if c.cancelRequested() {
		q.cancelled(c, "", now) // put back unrun, it would run later
		return
	}
	q.park(q.keys[c.row.Key], c, c.row.ParkedAt, true) // its parked time kept
}

// handClaimBack gives h the claim while running that c, chained behind it
// and now put back unrun, took over as it started, if c still holds it and
// h runs on unique while running under the same key.
func (q *queueState) handClaimBack(c, h *job, now time.Time) {
	if c.row.UniqueScope != batondriver.UniqueRunning || h.row.State != batondriver.JobStateRunning ||
		h.row.UniqueScope != c.row.UniqueScope || h.row.Unique != c.row.Unique {
		return
	}
	if cl := q.claims[claimKey{c.row.Unique, c.row.UniqueScope}]; cl != nil && cl.id == c.row.ID {
		q.claim(h, now)
	}
}

// unstart takes j, running, out of running as if it had not been leased:
// its lease forgotten, its attempt not counted, and its unique claim given
// up (running scope) or taken again if free (queued scope). The caller
// puts it in its next state.
func (q *queueState) unstart(j *job, now time.Time) {
	q.unlease(j)
	j.row.Attempt--
	q.reclaim(j, now)
}

// reclaim gives j, queued again after it started (a retry, a snooze, a
// lease taken back, a give-back), the unique claims of a queued job: a
// claim while running ends, and a claim while queued, given up when it
// started, is taken back unless a twin holds it.
func (q *queueState) reclaim(j *job, now time.Time) {
	switch j.row.UniqueScope {
	case batondriver.UniqueRunning:
		q.unclaim(j)
	case batondriver.UniqueQueued:
		if q.claimOf(j.row.UniqueScope, j.row.Unique, now) == nil {
			q.claim(j, now)
		}
	}
}

// giveBack returns j, running and not chained, to its place as if it had
// not been leased (batondriver.JobFinish.GiveBack): its attempt not
// counted, its unique claim as while queued, the job chained behind it
// back at the head of its key's parked jobs, and j available, holding its
// key's slot still, unless the key's limit was lowered below its holders
// since j was leased (see loweredFor): then j gives the slot up and waits
// at the head of the parked jobs, before the chained one. A job whose
// cancel was requested ends cancelled instead, its slot freed for the
// caller to promote into. It reports whether j is available.
func (q *queueState) giveBack(j *job, now time.Time) bool {
	q.unchain(j, now)
	q.unstart(j, now)
	if j.cancelRequested() { // it would run later: it ends, its slot freed
		if j.row.Key != "" {
			delete(q.keys[j.row.Key].holders, j.row.ID)
		}
		q.cancelled(j, "", now)
		return false
	}
	j.row.RunAt = now
	if j.row.Key != "" {
		if k := q.keys[j.row.Key]; k.loweredFor(j) {
			delete(k.holders, j.row.ID)
			q.park(k, j, now, true)
			return false
		}
	}
	q.add(j, batondriver.JobStateAvailable)
	return true
}

// loweredFor reports whether k's limit for j, a holder, was lowered below
// k's holders since j was leased. Under an override, holders beyond it
// mean just that: no job is admitted, chained or leased beyond it. Without
// one, j's limit is its own default, which never changes, so only a
// removed override can have lowered it; holders beyond it admitted under
// larger defaults of their own (mixed defaults) lowered nothing.
func (k *jobKey) loweredFor(j *job) bool {
	return len(k.holders) > k.limitFor(j) && (k.hasLimit || j.row.Fence <= k.limitFence)
}

// nextFence returns the queue's next fencing token, remembered as its last:
// strictly above every earlier one of the queue, so of each of its keys,
// however often a key went idle and was forgotten, and never below now in
// ms × 1024, so that tokens keep rising across a backend that lost its
// state.
func (q *queueState) nextFence(now time.Time) int64 {
	q.fence = max(q.fence+1, now.UnixMilli()*1024)
	return q.fence
}

// info returns k's state; with holders, the holding jobs by ID. A job
// chained behind a holder is its next: the links are exact (see job).
func (k *jobKey) info(queue string, holders bool) *batondriver.KeyInfo {
	ki := &batondriver.KeyInfo{
		Queue: queue, Key: k.name, Limit: k.limit(), Override: k.hasLimit,
		Holding: len(k.holders), Parked: k.parked.Len(),
	}
	for _, j := range k.holders {
		if j.row.State == batondriver.JobStateRunning {
			ki.Running++
			ki.Fence = max(ki.Fence, j.row.Fence)
		}
		if j.next != nil {
			ki.Chained++
			ki.Fence = max(ki.Fence, j.next.row.Fence)
		}
		if holders {
			h := &batondriver.KeyHolder{ID: j.row.ID, State: j.row.State}
			if j.row.State == batondriver.JobStateRunning {
				h.Fence, h.LeaseUntil = j.row.Fence, j.row.LeaseUntil
			}
			if j.next != nil {
				h.Next = j.next.row.ID
			}
			ki.Holders = append(ki.Holders, h)
		}
	}
	slices.SortFunc(ki.Holders, func(a, b *batondriver.KeyHolder) int { return cmp.Compare(a.ID, b.ID) })
	// The head's, as KeyInfo documents: O(1) on every backend.
	if e := k.parked.Front(); e != nil {
		ki.OldestParked = e.Value.(*job).row.ParkedAt
	}
	return ki
}

// claim is a job's hold on a unique key of its queue, in the class of the
// job's scope: a queue holds at most one claim per key and scope, so that
// a claim of one scope never takes the place of another's (see twin).
type claim struct {
	claimKey
	id string    // the claiming job
	at time.Time // when it claimed
	// until is when a period claim lapses; zero for the other scopes,
	// whose claims last until released.
	until time.Time
}

// claimKey names a claim: its unique key and the scope it is held in.
type claimKey struct {
	key   string
	scope batondriver.UniqueScope
}

// claimHeap orders period claims by when they lapse, for the sweep. A claim
// overwritten before it lapses stays in the heap until then and is skipped.
type claimHeap []*claim

func (h claimHeap) Len() int           { return len(h) }
func (h claimHeap) Less(i, k int) bool { return h[i].until.Before(h[k].until) }
func (h claimHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *claimHeap) Push(x any)        { *h = append(*h, x.(*claim)) }
func (h *claimHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}

// claimOf returns the live claim on a unique key in scope's class, or
// nil; a lapsed period claim is forgotten.
func (q *queueState) claimOf(scope batondriver.UniqueScope, key string, now time.Time) *claim {
	ck := claimKey{key, scope}
	c := q.claims[ck]
	if c != nil && !c.until.IsZero() && !now.Before(c.until) {
		delete(q.claims, ck)
		return nil
	}
	return c
}

// claim makes j, which has a unique key, its claimant in the class of its
// scope as of now: among twins of one scope, the last to claim holds it.
func (q *queueState) claim(j *job, now time.Time) {
	c := &claim{claimKey: claimKey{j.row.Unique, j.row.UniqueScope}, id: j.row.ID, at: now}
	if j.row.UniqueScope == batondriver.UniquePeriod {
		c.until = now.Add(j.period)
		heap.Push(&q.lapses, c)
	}
	q.claims[c.claimKey] = c
}

// unclaim releases j's unique claim if j holds it. A period claim stays
// until it lapses.
func (q *queueState) unclaim(j *job) {
	if j.row.Unique == "" || j.row.UniqueScope == batondriver.UniquePeriod {
		return
	}
	ck := claimKey{j.row.Unique, j.row.UniqueScope}
	if c := q.claims[ck]; c != nil && c.id == j.row.ID {
		delete(q.claims, ck)
	}
}

// sweepClaims forgets up to fetchBatch period claims that have lapsed.
func (q *queueState) sweepClaims(now time.Time) {
	for range fetchBatch {
		if len(q.lapses) == 0 || now.Before(q.lapses[0].until) {
			return
		}
		c := heap.Pop(&q.lapses).(*claim)
		if q.claims[c.claimKey] == c {
			delete(q.claims, c.claimKey)
		}
	}
}

// queued reports whether a job in state s is queued, as uniqueness means
// it: scheduled, parked or available.
func queued(s batondriver.JobState) bool {
	return s == batondriver.JobStateScheduled || s == batondriver.JobStateParked || s == batondriver.JobStateAvailable
}

// inScope reports whether a job in state s is in the states of scope (not
// UniquePeriod's).
func inScope(s batondriver.JobState, scope batondriver.UniqueScope) bool {
	switch scope {
	case batondriver.UniqueQueued:
		return queued(s)
	case batondriver.UniqueRunning:
		return s == batondriver.JobStateRunning
	case batondriver.UniqueUntilDone:
		return queued(s) || s == batondriver.JobStateRunning
	}
	return false
}

// twinScopes are the classes of claims an insert reads, in the order it
// prefers a twin among queued ones (for UniqueReplace), then among others.
var twinScopes = [...]batondriver.UniqueScope{batondriver.UniqueQueued, batondriver.UniqueUntilDone,
	batondriver.UniquePeriod, batondriver.UniqueRunning}

// twin returns the claim that an insert of u conflicts with, and its job
// (nil if gone: a period claim outlives its job), or a nil claim. Every
// class of claim on u.Key is read: its job conflicts if it is in the
// states of u.Scope, or for UniquePeriod if it was inserted less than
// u.Period ago — when its period claim was made, or else when it was
// created. A period claim holds until it lapses, whatever became of its
// job; any other claim is released in the step that takes its job out of
// its scope's states. Of several twins, a queued one is returned (for
// UniqueReplace), else the first in twinScopes order.
func (q *queueState) twin(u *batondriver.JobUnique, now time.Time) (*claim, *job) {
	var first *claim // the first conflicting claim, if no queued twin conflicts
	var firstJob *job
	for _, scope := range twinScopes {
		c := q.claimOf(scope, u.Key, now)
		if c == nil {
			continue
		}
		t := q.jobs[c.id]
		var conflict bool
		switch {
		case u.Scope != batondriver.UniquePeriod:
			conflict = t != nil && inScope(t.row.State, u.Scope)
		case !c.until.IsZero():
			conflict = now.Before(c.at.Add(u.Period))
		case t != nil:
			conflict = now.Before(t.row.CreatedAt.Add(u.Period))
		}
		if conflict && t != nil && queued(t.row.State) {
			return c, t
		}
		if conflict && first == nil {
			first, firstJob = c, t
		}
	}
	return first, firstJob
}

func checkKey(queue, key string) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	return batondriver.CheckKey(key)
}

func keyNotFound(queue, key string) error {
	return fmt.Errorf("%w: %q in queue %q", batondriver.ErrKeyNotFound, key, queue)
}

// KeySetLimit implements batondriver.KeyDriver. A key never used before is
// created by it; like every key, it is forgotten once idle, and so is a
// queue that never had a job once nothing is kept for it.
func (d *Driver) KeySetLimit(ctx context.Context, p *batondriver.KeySetLimitParams) (*batondriver.KeyInfo, error) {
	if err := checkKey(p.Queue, p.Key); err != nil {
		return nil, err
	}
	if !p.Reset {
		if err := batondriver.CheckKeyLimit(p.Key, p.Limit, 0); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	q := s.queue(p.Queue)
	k := q.key(p.Key)
	k.override, k.hasLimit = p.Limit, !p.Reset
	k.limitFence = q.fence
	if p.Reset {
		k.override = 0
	}
	q.demote(k, now)
	q.wake(q.promote(k)) // promote also forgets k if idle
	s.tidy(p.Queue, q)   // a queue that never had a job, left with nothing
	info := k.info(p.Queue, true)
	if k.overChained() {
		s.notify(p.Queue, batondriver.QueueNotice{Key: p.Key, Fence: info.Fence})
	}
	return info, nil
}

// overChained reports whether a job chained behind one of k's holders
// would take over a slot beyond the limit that admits it — the override,
// else its own default, as a chain asks (chain) — so that a change of
// limit recalls the key's chained jobs (batondriver.JobDriver.QueueListen).
func (k *jobKey) overChained() bool {
	for _, h := range k.holders {
		if h.next != nil && len(k.holders) > k.limitFor(h.next) {
			return true
		}
	}
	return false
}

// KeyGet implements batondriver.KeyDriver. A key is found while active.
func (d *Driver) KeyGet(ctx context.Context, p *batondriver.KeyParams) (*batondriver.KeyInfo, error) {
	if err := checkKey(p.Queue, p.Key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil || q.keys[p.Key] == nil {
		return nil, keyNotFound(p.Queue, p.Key)
	}
	return q.keys[p.Key].info(p.Queue, true), nil
}

// KeyList implements batondriver.KeyDriver. It sorts the queue's active
// keys on each call: O(n log n) in memory, where Redis reads an index.
func (d *Driver) KeyList(ctx context.Context, p *batondriver.KeyListParams) (*batondriver.KeyListResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	limit, err := batondriver.PageSize(p.Limit, p.Offset)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &batondriver.KeyListResult{}
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}
	keys := make([]*jobKey, 0, len(q.keys))
	for _, k := range q.keys {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b *jobKey) int {
		if c := cmp.Compare(b.parked.Len(), a.parked.Len()); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	res.Total = len(keys)
	if p.Offset < len(keys) {
		for _, k := range keys[p.Offset:min(p.Offset+limit, len(keys))] {
			res.Keys = append(res.Keys, k.info(p.Queue, false))
		}
	}
	return res, nil
}

package batonmem

import (
	"bytes"
	"cmp"
	"container/heap"
	"container/list"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/jobid"
)

const (
	// fetchBatch bounds how many due jobs, expired leases and expired
	// completed jobs one fetch handles each, so that a fetch costs little
	// however much is overdue; the next fetch goes on.
	fetchBatch = 100
	// maxWakeTokens caps a queue's unclaimed wake tokens: past that many,
	// more would only wake fetchers that find nothing.
	maxWakeTokens = 1000
	// errLeaseExpired is the error recorded for an attempt whose lease
	// expired.
	errLeaseExpired = "lease expired"
)

// jobStore holds every queue's jobs. Its zero value is empty and ready. It
// has a mutex of its own: jobs and locks never wait for each other.
//
// Completed jobs are kept for their retention, dead and cancelled ones for
// the fetches' DeadRetention, dropped ones for their DroppedRetention (or
// until retried or deleted), and removed by later fetches. A queue that
// ever had a job is remembered, with its paused flag, its schedules' last
// ticks, its dropped counter and its last fence, for the Driver's life; a
// concurrency key only while it is active (keys.go).
type jobStore struct {
	mu     sync.Mutex
	queues map[string]*queueState
	// listeners are the QueueListen listeners of each queue (notices.go);
	// kept apart from queues, which forget idle queues.
	listeners map[string]map[*queueListener]struct{}
}

// queueState is one queue: its jobs, indexed by state.
type queueState struct {
	jobs map[string]*job // every job, by ID
	// states holds each state's jobs, ordered for the transition that
	// takes them out of it: scheduled by RunAt (promotion), available by
	// priority then arrival (fetch), running by LeaseUntil (recovery; a
	// chained job last, never taken back on its own: see expiry),
	// completed by expiry (sweep), cancelled, dead and dropped by
	// FinishedAt. Parked jobs leave by their key's FIFO (jobKey.parked);
	// their heap, by ParkedAt then park order, serves JobList and counts.
	states map[batondriver.JobState]*jobHeap
	// bands holds the available jobs again, a heap per priority by
	// arrival, for OldestAvailable.
	bands   [batondriver.MaxPriority + 1]jobHeap
	seq     uint64 // numbers every entry into a state: arrival order
	used    bool   // had a job: listed by QueueList
	paused  bool
	once    map[string]time.Time // recurring schedule name -> last tick inserted
	dropped int64                // jobs ever dropped
	// schedules are the registered recurring schedules (schedules.go).
	schedules map[string]*batondriver.QueueSchedule

	keys   map[string]*jobKey  // the active concurrency keys (keys.go)
	fence  int64               // the last fencing token of any of its keys
	claims map[claimKey]*claim // unique key and scope -> its claim
	lapses claimHeap           // period claims, by when they lapse

	tokens  int       // unclaimed wake tokens; 0 while anyone waits
	waiters list.List // of *jobWaiter, first come first woken
}

// job is one stored job. Its row is never handed out; callers get copies.
//
// A chained job (see batondriver.JobFetchParams.Chain) is running, holds no
// slot of its key, and has row.After = the ID of the job ahead of it, a
// running holder of the same key whose next is the chained job; both links
// are set and cleared together (chain, handOver, unchain, leave), so each
// job is chained behind at most one job, has at most one job chained
// behind it, and never both.
type job struct {
	row      batondriver.JobRow
	seq      uint64    // when it entered its state, in the queue's order
	expireAt time.Time // completed: when it may be swept
	pos      [2]int    // its index in its state's heap and (available) in its band

	busyDelay time.Duration // OnBusyReschedule's delay
	period    time.Duration // UniquePeriod's window
	parkElem  *list.Element // parked: its place in its key's parked queue
	next      *job          // running: the job chained behind it, or nil
	// attemptedBefore is, while the job is chained, its AttemptedAt before
	// it was: unchain gives it back with its attempt.
	attemptedBefore time.Time
	// cancelReason is, while a cancel is requested (row.CancelRequestedAt),
	// the request's reason.
	cancelReason string
	// output is what the latest completed run recorded (JobRow.Output),
	// which only adminRow copies.
	output []byte
}

// jobWaiter is one JobWait call. granted is set, and ch signalled, when an
// insert hands it a token.
type jobWaiter struct {
	ch      chan struct{}
	granted bool
}

func newQueueState() *queueState {
	q := &queueState{
		jobs: make(map[string]*job),
		states: map[batondriver.JobState]*jobHeap{
			batondriver.JobStateScheduled: {less: timeThenSeq(runAt)},
			batondriver.JobStateAvailable: {less: priorityThenSeq},
			batondriver.JobStateRunning:   {less: timeThenSeq(expiry)},
			batondriver.JobStateCompleted: {less: timeThenSeq(expireAt)},
			batondriver.JobStateCancelled: {less: timeThenSeq(finishedAt)},
			batondriver.JobStateDead:      {less: timeThenSeq(finishedAt)},
			batondriver.JobStateParked:    {less: timeThenSeq(parkedAt)},
			batondriver.JobStateDropped:   {less: timeThenSeq(finishedAt)},
		},
		keys:   make(map[string]*jobKey),
		claims: make(map[claimKey]*claim),
	}
	for i := range q.bands {
		q.bands[i] = jobHeap{slot: 1, less: priorityThenSeq}
	}
	return q
}

func runAt(j *job) time.Time       { return j.row.RunAt }
func expireAt(j *job) time.Time    { return j.expireAt }
func finishedAt(j *job) time.Time  { return j.row.FinishedAt }
func attemptedAt(j *job) time.Time { return j.row.AttemptedAt }
func parkedAt(j *job) time.Time    { return j.row.ParkedAt }

// never is a time after every lease's end.
var never = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// expiry is when the recovery takes a running job back: its LeaseUntil, or
// never for a chained job, which goes back with the job ahead of it. A job
// whose expiry changes while running is fixed in the running heap.
func expiry(j *job) time.Time {
	if j.row.After != "" {
		return never
	}
	return j.row.LeaseUntil
}

func priorityThenSeq(a, b *job) bool {
	if a.row.Priority != b.row.Priority {
		return a.row.Priority < b.row.Priority
	}
	return a.seq < b.seq
}

func timeThenSeq(key func(*job) time.Time) func(a, b *job) bool {
	return func(a, b *job) bool {
		if ta, tb := key(a), key(b); !ta.Equal(tb) {
			return ta.Before(tb)
		}
		return a.seq < b.seq
	}
}

// listKey is the time JobList orders a state by, oldest first.
func listKey(s batondriver.JobState) func(*job) time.Time {
	switch s {
	case batondriver.JobStateScheduled:
		return runAt
	case batondriver.JobStateRunning:
		return attemptedAt
	case batondriver.JobStateParked:
		return parkedAt
	default:
		return finishedAt
	}
}

// jobHeap is a binary heap of jobs that keeps each job's index in
// job.pos[slot], so that any job leaves or moves in O(log n).
type jobHeap struct {
	jobs []*job
	slot int
	less func(a, b *job) bool
}

func (h *jobHeap) Len() int           { return len(h.jobs) }
func (h *jobHeap) Less(i, k int) bool { return h.less(h.jobs[i], h.jobs[k]) }
func (h *jobHeap) Swap(i, k int) {
	h.jobs[i], h.jobs[k] = h.jobs[k], h.jobs[i]
	h.jobs[i].pos[h.slot] = i
	h.jobs[k].pos[h.slot] = k
}
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.pos[h.slot] = len(h.jobs)
	h.jobs = append(h.jobs, j)
}
func (h *jobHeap) Pop() any {
	n := len(h.jobs) - 1
	j := h.jobs[n]
	h.jobs[n] = nil
	h.jobs = h.jobs[:n]
	return j
}

// first returns the least job, or nil.
func (h *jobHeap) first() *job {
	if len(h.jobs) == 0 {
		return nil
	}
	return h.jobs[0]
}

// add puts j into state s, last in arrival order.
func (q *queueState) add(j *job, s batondriver.JobState) {
	j.row.State = s
	q.seq++
	j.seq = q.seq
	heap.Push(q.states[s], j)
	if s == batondriver.JobStateAvailable {
		heap.Push(&q.bands[j.row.Priority], j)
	}
}

// remove takes j out of its state's indexes, its key's parked queue
// included (not out of q.jobs, nor out of its key's holders).
func (q *queueState) remove(j *job) {
	heap.Remove(q.states[j.row.State], j.pos[0])
	switch j.row.State {
	case batondriver.JobStateAvailable:
		heap.Remove(&q.bands[j.row.Priority], j.pos[1])
	case batondriver.JobStateParked:
		q.keys[j.row.Key].parked.Remove(j.parkElem)
		j.parkElem = nil
	}
}

// unlease takes a running job out of running and forgets its lease.
func (q *queueState) unlease(j *job) {
	q.remove(j)
	j.row.Lease, j.row.LeaseUntil = "", time.Time{}
}

// schedule puts j (in no state, holding no slot) in scheduled at at, or, if
// at is not after now, admits it again with RunAt now: available or, if its
// key is busy, parked. It reports whether j became available.
func (q *queueState) schedule(j *job, at, now time.Time) bool {
	if at.After(now) {
		j.row.RunAt = at
		q.add(j, batondriver.JobStateScheduled)
		return false
	}
	j.row.RunAt = now
	return q.admit(j, now, false) == admitted
}

// end puts j (in no state) in the terminal state s.
func (q *queueState) end(j *job, s batondriver.JobState, now time.Time) {
	j.row.FinishedAt = now
	q.add(j, s)
}

// fail records the error of j's current attempt, keeping the newest
// batondriver.MaxErrors.
func (j *job) fail(now time.Time, msg string) {
	j.row.Errors = append(j.row.Errors, batondriver.AttemptError{Attempt: j.row.Attempt, At: now, Error: msg})
	if n := len(j.row.Errors) - batondriver.MaxErrors; n > 0 {
		j.row.Errors = slices.Delete(j.row.Errors, 0, n)
	}
}

// held returns the running job id if lease is its current, unexpired lease.
// An expired lease is not held even before a fetch takes the job back.
func (q *queueState) held(id, lease string, now time.Time) *job {
	if q == nil {
		return nil
	}
	j := q.jobs[id]
	if j == nil || j.row.State != batondriver.JobStateRunning || j.row.Lease != lease || !j.row.LeaseUntil.After(now) {
		return nil
	}
	return j
}

// copyRow returns a copy of j's row that shares no memory with the store.
func (j *job) copyRow() *batondriver.JobRow {
	r := j.row
	r.Args = bytes.Clone(r.Args)
	r.Tags = slices.Clone(r.Tags)
	r.Metadata = bytes.Clone(r.Metadata)
	r.Errors = slices.Clone(r.Errors)
	return &r
}

// adminRow is copyRow with the job's output, for JobGet and JobList.
func (j *job) adminRow() *batondriver.JobRow {
	r := j.copyRow()
	r.Output = bytes.Clone(j.output)
	return r
}

// wake adds n tokens (capped) and hands them to waiters, first come first
// served, one each.
func (q *queueState) wake(n int) {
	q.tokens = min(q.tokens+n, maxWakeTokens)
	for q.tokens > 0 && q.waiters.Len() > 0 {
		w := q.waiters.Remove(q.waiters.Front()).(*jobWaiter)
		w.granted = true
		w.ch <- struct{}{} // buffered, and sent once
		q.tokens--
	}
}

// queue returns the named queue, creating it. s.mu must be held.
func (s *jobStore) queue(name string) *queueState {
	if s.queues == nil {
		s.queues = make(map[string]*queueState)
	}
	q := s.queues[name]
	if q == nil {
		q = newQueueState()
		s.queues[name] = q
	}
	return q
}

// tidy forgets a queue that never had a job once nothing else is kept for
// it. s.mu must be held.
func (s *jobStore) tidy(name string, q *queueState) {
	if !q.used && !q.paused && q.waiters.Len() == 0 && len(q.jobs) == 0 && len(q.keys) == 0 && len(q.schedules) == 0 {
		delete(s.queues, name)
	}
}

// newLease returns a fresh 128-bit random lease.
func newLease() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func badParams(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{batondriver.ErrBadParams}, args...)...)
}

func checkQueue(queue string) error {
	return batondriver.CheckQueue(queue)
}

func checkJob(queue, id string) error {
	if err := checkQueue(queue); err != nil {
		return err
	}
	if id == "" {
		return badParams("empty job ID")
	}
	return nil
}

func notFound(queue, id string) error {
	return fmt.Errorf("%w: %q in queue %q", batondriver.ErrJobNotFound, id, queue)
}

// lockJob checks the queue and ID naming one job and ctx, then locks the
// store and finds the job in its queue. Without an error the caller holds
// s.mu and calls unlock; the error is ErrBadParams's, ctx's or notFound's,
// and then nothing is locked.
func (d *Driver) lockJob(ctx context.Context, queue, id string) (q *queueState, j *job, unlock func(), err error) {
	if err := checkJob(queue, id); err != nil {
		return nil, nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	if q = s.queues[queue]; q != nil {
		j = q.jobs[id]
	}
	if j == nil {
		s.mu.Unlock()
		return nil, nil, nil, notFound(queue, id)
	}
	return q, j, s.mu.Unlock, nil
}

// checkInsert validates job #i of an insert.
func checkInsert(i int, in *batondriver.JobInsert) error {
	switch {
	case in == nil:
		return badParams("job #%d is nil", i)
	case in.Kind == "":
		return badParams("job #%d: empty kind", i)
	case in.Priority < 0 || in.Priority > batondriver.MaxPriority:
		return badParams("job #%d: priority %d out of range 0..%d", i, in.Priority, batondriver.MaxPriority)
	case in.MaxAttempts < 1:
		return badParams("job #%d: MaxAttempts %d, must be at least 1", i, in.MaxAttempts)
	}
	if err := batondriver.CheckDue(in.RunAt, in.Delay); err != nil {
		return fmt.Errorf("%w (job #%d)", err, i)
	}
	if err := batondriver.CheckJobInsertKeys(in); err != nil {
		return fmt.Errorf("%w (job #%d)", err, i)
	}
	return nil
}

// JobInsert implements batondriver.JobDriver. IDs come from package jobid;
// an available or parked job's RunAt is the time of the insert (a past
// RunAt is not kept). Either every job is inserted, resolved to its twin or
// rejected, or, on invalid params, nothing is done.
func (d *Driver) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	for i, in := range p.Jobs {
		if err := checkInsert(i, in); err != nil {
			return nil, err
		}
	}
	if p.Once != nil && (p.Once.Name == "" || p.Once.Tick.IsZero()) {
		return nil, badParams("Once needs a Name and a Tick")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := len(p.Jobs)
	res := &batondriver.JobInsertResult{
		Jobs:   make([]*batondriver.JobRow, 0, n),
		Status: make([]batondriver.JobInsertStatus, 0, n),
		Reason: make([]string, 0, n),
	}
	if n == 0 {
		return res, nil
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	q := s.queue(p.Queue)
	if p.Once != nil {
		if q.once == nil {
			q.once = make(map[string]time.Time)
		}
		if last, ok := q.once[p.Once.Name]; ok && !p.Once.Tick.After(last) {
			res.Skipped, res.LastTick = true, last
			return res, nil
		}
		q.once[p.Once.Name] = p.Once.Tick
	}
	q.used = true
	woken := 0
	earliest := q.earliest() // of the scheduled jobs before this insert
	for _, in := range p.Jobs {
		if in.Delay > 0 { // due by this backend's clock
			at := *in
			at.RunAt, at.Delay = now.Add(in.Delay), 0
			in = &at
		}
		row, status, reason := q.insert(p.Queue, in, now)
		if row != nil && status == batondriver.JobInserted && row.State == batondriver.JobStateAvailable {
			woken++
		}
		res.Jobs = append(res.Jobs, row)
		res.Status = append(res.Status, status)
		res.Reason = append(res.Reason, reason)
	}
	if q.newEarliest(earliest) {
		woken++
	}
	q.wake(woken)
	return res, nil
}

// earliest is the run time of q's first scheduled job, zero if none.
func (q *queueState) earliest() time.Time {
	if j := q.states[batondriver.JobStateScheduled].first(); j != nil {
		return j.row.RunAt
	}
	return time.Time{}
}

// newEarliest reports whether q's first scheduled job is due before
// before, the earliest run time before a call (zero: none). Such a job
// wakes a fetcher, so that it learns the new NextRunAt instead of sleeping
// through it — whichever process inserted, finished or took it back. A job
// due at before itself, or the first job moved later, wakes nobody: the
// fetchers that learnt before wake then anyway (as on Redis).
func (q *queueState) newEarliest(before time.Time) bool {
	at := q.earliest()
	return !at.IsZero() && (before.IsZero() || at.Before(before))
}

// insert inserts one valid job, or resolves it to its twin, and returns
// what JobInsertResult reports of it.
func (q *queueState) insert(queue string, in *batondriver.JobInsert, now time.Time) (*batondriver.JobRow, batondriver.JobInsertStatus, string) {
	u := in.Unique
	if u != nil {
		if c, twin := q.twin(u, now); c != nil {
			return q.conflict(queue, u, in, c, twin, now)
		}
	}
	j := &job{row: batondriver.JobRow{
		ID:          jobid.New(),
		Queue:       queue,
		Kind:        in.Kind,
		Args:        bytes.Clone(in.Args),
		Priority:    in.Priority,
		MaxAttempts: in.MaxAttempts,
		Tags:        slices.Clone(in.Tags),
		Metadata:    bytes.Clone(in.Metadata),
		Key:         in.Key,
		Limit:       in.Limit,
		CreatedAt:   now,
	}, busyDelay: in.BusyDelay}
	if in.Key != "" { // a policy is a key's: a job without one has none
		j.row.OnBusy = cmp.Or(in.OnBusy, batondriver.OnBusyWait)
	}
	if u != nil {
		j.row.Unique, j.row.UniqueScope, j.period = u.Key, u.Scope, u.Period
	}
	if in.RunAt.After(now) {
		j.row.RunAt = in.RunAt
		q.add(j, batondriver.JobStateScheduled)
	} else {
		j.row.RunAt = now
		if q.admit(j, now, true) == refused {
			return nil, batondriver.JobRejected, "key busy"
		}
	}
	q.jobs[j.row.ID] = j
	// A running-scope claim is made at fetch; a job dropped at once keeps
	// only a period claim.
	if u != nil && u.Scope != batondriver.UniqueRunning &&
		(j.row.State != batondriver.JobStateDropped || u.Scope == batondriver.UniquePeriod) {
		q.claim(j, now)
	}
	return j.copyRow(), batondriver.JobInserted, ""
}

// conflict answers an insert of in into queue whose unique key u conflicts
// with claim c, whose job twin may be gone (a period claim outlives its
// job): its row then has only its ID and queue, so that the caller still
// learns which job it was, and tells a duplicate from a busy key (nil).
func (q *queueState) conflict(queue string, u *batondriver.JobUnique, in *batondriver.JobInsert, c *claim, twin *job, now time.Time) (*batondriver.JobRow, batondriver.JobInsertStatus, string) {
	row := &batondriver.JobRow{ID: c.id, Queue: queue}
	if twin != nil {
		row = twin.copyRow()
	}
	switch {
	case u.OnConflict == batondriver.UniqueReject:
		return row, batondriver.JobRejected, "duplicate of " + c.id
	case twin == nil:
		return row, batondriver.JobDuplicate, ""
	case u.OnConflict == batondriver.UniqueReplace && queued(twin.row.State) &&
		(twin.row.Kind != in.Kind || twin.row.Key != in.Key):
		// The new args under the twin's kind or key would run another
		// kind's handler, or run under another key's slots.
		return row, batondriver.JobRejected, batondriver.NotReplaced(c.id, twin.row.Kind, twin.row.Key, in.Kind, in.Key)
	case u.OnConflict == batondriver.UniqueReplace && queued(twin.row.State):
		twin.row.Args = bytes.Clone(in.Args)
		if in.RunAt.After(now) && twin.row.State == batondriver.JobStateScheduled {
			twin.row.RunAt = in.RunAt
			heap.Fix(q.states[batondriver.JobStateScheduled], twin.pos[0])
		}
		return twin.copyRow(), batondriver.JobReplaced, ""
	}
	return twin.copyRow(), batondriver.JobDuplicate, ""
}

// JobFetch implements batondriver.JobDriver. Before leasing, it admits up
// to 100 due jobs, takes back up to 100 expired leases, and removes up to
// 100 completed jobs past their retention (and as many dead, cancelled and
// dropped jobs past theirs, and lapsed period claims), paused or not. A job
// taken back gets the error "lease expired" for the attempt, whether it
// runs again or is dead (or cancelled, if a cancel was requested). Unless the queue is paused, jobs it made available
// and did not lease wake other fetchers, and a fetch that empties the
// available jobs drops the queue's unclaimed wake tokens: nobody would find
// a job. A job it schedules (a lease taken back, retried after
// RecoverDelay) due before every job scheduled as it began wakes one,
// paused or not (see newEarliest). With Chain, the jobs chained behind the leased ones (see chain)
// follow them in Jobs, with fences after theirs; they neither count toward
// Max nor change More. A job chained behind an expired lease goes back to
// its key's parked jobs first and is not counted in Recovered.
func (d *Driver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if p.Max < 0 || p.LeaseTTL < time.Millisecond || p.RecoverDelay < 0 || p.DeadRetention < 0 || p.DroppedRetention < 0 {
		return nil, badParams("fetch Max %d (not negative), LeaseTTL %v (at least 1ms), RecoverDelay %v, DeadRetention %v and DroppedRetention %v (not negative)",
			p.Max, p.LeaseTTL, p.RecoverDelay, p.DeadRetention, p.DroppedRetention)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	res := &batondriver.JobFetchResult{Now: now}
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}

	since := q.seq // jobs that enter a state from here on entered it in this call
	made := 0      // jobs made available
	scheduled := q.states[batondriver.JobStateScheduled]
	earliest := q.earliest() // of the scheduled jobs as the call began
	for range fetchBatch {
		j := scheduled.first()
		if j == nil || j.row.RunAt.After(now) {
			break
		}
		q.remove(j)
		// RunAt stays when it became due. A job whose OnBusy is not yet
		// "wait" was never admitted: this is its first admission.
		switch q.admit(j, now, j.row.OnBusy != batondriver.OnBusyWait) {
		case admitted:
			made++
		case refused: // its insert succeeded: dropped, not rejected
			q.drop(j, q.keys[j.row.Key], now)
		}
	}
	running := q.states[batondriver.JobStateRunning]
	for range fetchBatch {
		j := running.first()
		if j == nil || expiry(j).After(now) {
			break
		}
		q.unchain(j, now) // first, so that j's freed slot promotes it first
		q.unlease(j)
		made += q.release(j)
		res.Recovered++
		if j.cancelRequested() {
			q.cancelled(j, errLeaseExpired, now) // not run again
			continue
		}
		j.fail(now, errLeaseExpired)
		if j.row.UniqueScope == batondriver.UniqueRunning {
			q.unclaim(j)
		}
		if j.row.Attempt >= j.row.MaxAttempts {
			q.end(j, batondriver.JobStateDead, now)
			q.unclaim(j)
		} else {
			q.reclaim(j, now)
			if q.schedule(j, now.Add(p.RecoverDelay), now) {
				made++
			}
		}
	}
	completed := q.states[batondriver.JobStateCompleted]
	for range fetchBatch {
		j := completed.first()
		if j == nil || j.expireAt.After(now) {
			break
		}
		q.remove(j)
		delete(q.jobs, j.row.ID)
	}
	q.sweep(batondriver.JobStateDead, p.DeadRetention, now)
	q.sweep(batondriver.JobStateCancelled, p.DeadRetention, now)
	q.sweep(batondriver.JobStateDropped, p.DroppedRetention, now)
	q.sweepClaims(now)
	if j := scheduled.first(); j != nil {
		res.NextRunAt = j.row.RunAt
	}
	// A job this call scheduled (a lease taken back, retried after
	// RecoverDelay) due before every job scheduled as it began wakes one
	// fetcher, as an insert's or an outcome's does: nobody else knows it.
	// One due as it began (a due job its on-busy policy rescheduled) is
	// known to every fetcher that knew that job's RunAt, and they fetch now.
	earlier := q.newEarliest(earliest)
	if q.paused {
		res.Paused = true
		if earlier {
			q.wake(1)
		}
		return res, nil
	}

	leased, fresh := q.lease(p.Max, p.LeaseTTL, now, since)
	var chained []*job
	promoted := 0 // by the chains, after the lease
	if p.Chain {
		chained, promoted = q.chain(leased, now)
	}
	res.Jobs = rows(leased, chained)
	available := q.states[batondriver.JobStateAvailable]
	if len(leased) < p.Max {
		q.tokens = 0
	} else {
		res.More = available.Len() > 0
		// One token per job made available and left so: a job this fetch
		// made available and leased itself wakes nobody (as on Redis).
		if left := made - fresh; left > 0 {
			q.wake(min(left, available.Len()-promoted))
		}
	}
	if promoted > 0 {
		res.More = true
		q.wake(promoted)
	}
	if earlier { // after the tokens were dropped
		q.wake(1)
	}
	return res, nil
}

// lease leases up to max available jobs, in fetch order, for ttl from now
// (see start), and returns them in that order, and how many of them became
// available after the queue's entry number since: made available by the
// caller's own call, they need not wake anyone.
func (q *queueState) lease(max int, ttl time.Duration, now time.Time, since uint64) (out []*job, fresh int) {
	available := q.states[batondriver.JobStateAvailable]
	for len(out) < max && available.Len() > 0 {
		j := available.first()
		if j.seq > since {
			fresh++
		}
		q.remove(j)
		q.start(j, now.Add(ttl), now)
		out = append(out, j)
	}
	return out, fresh
}

// start leases j, in no state, until until: running, its attempt counted
// and started now, a fresh lease, a keyed job's next fence, its unique
// claim taken (running scope: among twins unique while running, the one
// that started last holds it) or given up (queued scope).
// A chained job's After is set beforehand, so that it enters running never
// to expire.
func (q *queueState) start(j *job, until, now time.Time) {
	j.row.Attempt++
	j.row.AttemptedAt = now
	j.row.Lease = newLease()
	j.row.LeaseUntil = until
	if j.row.Key != "" {
		j.row.Fence = q.nextFence(now)
	}
	switch j.row.UniqueScope {
	case batondriver.UniqueRunning:
		q.claim(j, now)
	case batondriver.UniqueQueued:
		q.unclaim(j)
	}
	q.add(j, batondriver.JobStateRunning)
}

// rows returns copies of the rows of the jobs of each list, in order; nil
// if there are none.
func rows(lists ...[]*job) []*batondriver.JobRow {
	var out []*batondriver.JobRow
	for _, js := range lists {
		for _, j := range js {
			out = append(out, j.copyRow())
		}
	}
	return out
}

// sweep removes up to fetchBatch jobs that ended in state st more than
// retention ago; a retention of 0 keeps them.
func (q *queueState) sweep(st batondriver.JobState, retention time.Duration, now time.Time) {
	if retention == 0 {
		return
	}
	ended := q.states[st]
	for range fetchBatch {
		j := ended.first()
		if j == nil || j.row.FinishedAt.After(now.Add(-retention)) {
			return
		}
		q.remove(j)
		delete(q.jobs, j.row.ID)
	}
}

// JobWait implements batondriver.JobDriver. Each wake token (one per job
// made available and not leased by the call that made it available, at
// most 1000 unclaimed)
// wakes exactly one call, the longest waiting; a call that finds a token
// returns at once. A call whose ctx ends after it was handed a token passes
// the token on. Timeout must be at least 1ms.
func (d *Driver) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	if err := checkQueue(p.Queue); err != nil {
		return err
	}
	if p.Timeout < time.Millisecond {
		return badParams("wait Timeout %v, must be at least 1ms", p.Timeout)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := &d.jobs
	s.mu.Lock()
	q := s.queue(p.Queue)
	if q.tokens > 0 {
		q.tokens--
		s.mu.Unlock()
		return nil
	}
	w := &jobWaiter{ch: make(chan struct{}, 1)}
	e := q.waiters.PushBack(w)
	s.mu.Unlock()

	timer := time.NewTimer(p.Timeout)
	defer timer.Stop()
	var err error
	select {
	case <-w.ch:
		return nil
	case <-timer.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !w.granted:
		q.waiters.Remove(e)
		s.tidy(p.Queue, q)
	case err != nil:
		q.wake(1) // granted as ctx ended: the token goes to the next waiter
	}
	// A timeout that raced a grant keeps the token: the caller fetches.
	return err
}

// JobExtend implements batondriver.JobDriver. A lease that has expired is
// never extended, even before a fetch takes its job back. Extending a
// chained job extends the job ahead of it, and the reverse: both keep one
// LeaseUntil.
func (d *Driver) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if p.TTL < time.Millisecond {
		return nil, badParams("extend TTL %v, must be at least 1ms", p.TTL)
	}
	for i, l := range p.Leases {
		if l.ID == "" || l.Lease == "" {
			return nil, badParams("lease #%d: empty ID or lease", i)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	res := &batondriver.JobExtendResult{Now: now}
	q := s.queues[p.Queue]
	for _, l := range p.Leases {
		j := q.held(l.ID, l.Lease, now)
		if j == nil {
			res.Lost = append(res.Lost, l.ID)
			continue
		}
		q.extend(j, now.Add(p.TTL))
		if j.cancelRequested() {
			res.CancelRequested = append(res.CancelRequested, l.ID)
		}
	}
	return res, nil
}

// extend makes the held lease of j last until until, and with it the lease
// of the job chained behind j or of the job ahead of j: a chain lives on
// one lease.
func (q *queueState) extend(j *job, until time.Time) {
	running := q.states[batondriver.JobStateRunning]
	for _, x := range [...]*job{q.ahead(j), j, j.next} {
		if x != nil {
			x.row.LeaseUntil = until
			heap.Fix(running, x.pos[0])
		}
	}
}

// JobFinish implements batondriver.JobDriver. A lease that has expired is
// stale even before a fetch takes its job back. The Error of a retry, cancel
// or dead outcome is recorded even when empty; that of an Again, a
// successful end, is not. A Retry, Snooze or Again whose RunAt is not in the
// future admits the job at once (RunAt now): available, and a waiter woken,
// or parked behind its key's parked jobs. A job chained behind a finished
// job takes over its slot first (see leave), unless the outcome asks to
// Unchain it: then it goes back to its key's parked jobs as when the lease
// of the job ahead expires (see unchain). With Chain, jobs are chained
// behind those, in the order of the outcomes, then behind the jobs Fetch
// leases, and follow the leased jobs in Jobs.
func (d *Driver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if p.Retention < 0 {
		return nil, badParams("negative Retention %v", p.Retention)
	}
	if f := p.Fetch; f != nil && (f.Max < 1 || f.LeaseTTL < time.Millisecond) {
		return nil, badParams("finish Fetch.Max %d (at least 1), Fetch.LeaseTTL %v (at least 1ms)", f.Max, f.LeaseTTL)
	}
	for i, f := range p.Finished {
		if f == nil {
			return nil, badParams("outcome #%d is nil", i)
		}
		if f.ID == "" || f.Lease == "" {
			return nil, badParams("outcome #%d: empty ID or lease", i)
		}
		switch f.Outcome {
		case batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze,
			batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead, batondriver.JobOutcomeAgain:
		default:
			return nil, badParams("outcome #%d: unknown outcome %q", i, f.Outcome)
		}
		if err := batondriver.CheckFinish(f); err != nil {
			return nil, fmt.Errorf("outcome #%d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	res := &batondriver.JobFinishResult{}
	q := s.queues[p.Queue]
	var since uint64 // jobs that enter a state after it entered it in this call
	var earliest time.Time
	if q != nil {
		since, earliest = q.seq, q.earliest()
	}
	woken := 0       // jobs made available
	var heirs []*job // chained jobs that took over a slot, in outcome order
	for _, f := range p.Finished {
		if f.Delay > 0 { // due by this backend's clock
			at := *f
			at.RunAt, at.Delay = now.Add(f.Delay), 0
			f = &at
		}
		j := q.held(f.ID, f.Lease, now)
		if j == nil {
			res.Stale = append(res.Stale, f.ID)
			continue
		}
		// An heir whose own outcome comes later in the call no longer runs:
		// nothing is chained behind it (it may be deleted, its state
		// unchanged).
		heirs = slices.DeleteFunc(heirs, func(h *job) bool { return h == j })
		if f.Outcome == batondriver.JobOutcomeSnooze && !f.RunAt.After(now) {
			if h := q.ahead(j); h != nil {
				// A chained job given back before the outcome of the job
				// ahead (its client will not run it): back to the head of
				// its key's parked jobs, as if the job ahead unchained it,
				// and promoted at once if a slot freed while it was
				// chained.
				q.unchain(h, now)
				woken += q.promote(q.keys[j.row.Key])
				continue
			}
			if f.GiveBack {
				if q.giveBack(j, now) {
					woken++
				}
				if j.row.Key != "" { // the job it unchained, as above
					woken += q.promote(q.keys[j.row.Key])
				}
				continue
			}
		}
		if f.Unchain {
			q.unchain(j, now) // then j's freed slot promotes it first
		}
		heir, promoted := q.leave(j)
		woken += promoted
		if heir != nil {
			heirs = append(heirs, heir)
		}
		if j.row.UniqueScope == batondriver.UniqueRunning {
			q.unclaim(j)
		}
		if j.cancelRequested() && f.Outcome != batondriver.JobOutcomeCompleted {
			q.cancelled(j, f.Error, now) // every outcome but a completion
			continue
		}
		if len(f.Output) > 0 { // a Completed or an Again (CheckFinish)
			j.output = bytes.Clone(f.Output)
		}
		switch f.Outcome {
		case batondriver.JobOutcomeCompleted:
			q.complete(j, p.Retention, now)
		case batondriver.JobOutcomeRetry:
			j.fail(now, f.Error)
			if j.row.Attempt >= j.row.MaxAttempts {
				q.end(j, batondriver.JobStateDead, now)
				q.unclaim(j)
				break
			}
			q.reclaim(j, now)
			if q.schedule(j, f.RunAt, now) {
				woken++
			}
		case batondriver.JobOutcomeSnooze:
			j.row.Attempt--
			q.reclaim(j, now)
			if q.schedule(j, f.RunAt, now) {
				woken++
			}
		case batondriver.JobOutcomeCancel:
			j.fail(now, f.Error)
			q.end(j, batondriver.JobStateCancelled, now)
			q.unclaim(j)
		case batondriver.JobOutcomeDead:
			j.fail(now, f.Error)
			q.end(j, batondriver.JobStateDead, now)
			q.unclaim(j)
		case batondriver.JobOutcomeAgain:
			if j.row.UniqueScope == batondriver.UniqueQueued {
				// A queued twin inserted while j ran is the next run.
				if c := q.claimOf(j.row.UniqueScope, j.row.Unique, now); c != nil && c.id != j.row.ID &&
					q.jobs[c.id] != nil && queued(q.jobs[c.id].row.State) {
					q.complete(j, p.Retention, now)
					continue
				}
				q.claim(j, now)
			}
			j.row.Attempt = 0
			j.row.Runs++
			if q.schedule(j, f.RunAt, now) {
				woken++
			}
		}
	}
	var leased, chained []*job
	if p.Fetch != nil && q != nil && !q.paused {
		var fresh int
		leased, fresh = q.lease(p.Fetch.Max, p.Fetch.LeaseTTL, now, since)
		// One token per job made available and left so: one leased here
		// wakes nobody (as on Redis).
		woken = min(woken-fresh, q.states[batondriver.JobStateAvailable].Len())
		if len(leased) < p.Fetch.Max {
			woken = 0
		}
	}
	if p.Chain && q != nil {
		var promoted int // by the chains, after the lease
		chained, promoted = q.chain(append(heirs, leased...), now)
		woken = max(woken, 0) + promoted
	}
	res.Jobs = rows(leased, chained)
	if q != nil && q.newEarliest(earliest) {
		woken = max(woken, 0) + 1
	}
	if woken > 0 {
		q.wake(woken)
	}
	return res, nil
}

// complete ends j, in no state and holding no slot, as completed: kept for
// retention, or deleted at once if it is 0. It releases j's unique claim.
func (q *queueState) complete(j *job, retention time.Duration, now time.Time) {
	q.unclaim(j)
	if retention == 0 {
		delete(q.jobs, j.row.ID)
		return
	}
	j.expireAt = now.Add(retention)
	q.end(j, batondriver.JobStateCompleted, now)
}

// JobGet implements batondriver.JobDriver.
func (d *Driver) JobGet(ctx context.Context, p *batondriver.JobGetParams) (*batondriver.JobRow, error) {
	_, j, unlock, err := d.lockJob(ctx, p.Queue, p.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return j.adminRow(), nil
}

// JobList implements batondriver.JobDriver. Available jobs are listed in
// fetch order (priority, then arrival), scheduled ones by RunAt, running
// ones by AttemptedAt, parked ones by ParkedAt then park order, the others
// by FinishedAt. A Limit of 0 means 100. Each call sorts the state's jobs,
// but a key's parked jobs, listed in its queue's order.
func (d *Driver) JobList(ctx context.Context, p *batondriver.JobListParams) (*batondriver.JobListResult, error) {
	if err := batondriver.CheckJobList(p); err != nil {
		return nil, err
	}
	limit, _ := batondriver.PageSize(p.Limit, p.Offset)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &batondriver.JobListResult{}
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}
	if p.Key != "" {
		k := q.keys[p.Key]
		if k == nil {
			return res, nil
		}
		res.Total = k.parked.Len()
		i := 0
		for e := k.parked.Front(); e != nil && len(res.Jobs) < limit; e = e.Next() {
			if i >= p.Offset {
				res.Jobs = append(res.Jobs, e.Value.(*job).adminRow())
			}
			i++
		}
		return res, nil
	}
	all := slices.Clone(q.states[p.State].jobs)
	res.Total = len(all)
	if p.State == batondriver.JobStateAvailable {
		slices.SortFunc(all, func(a, b *job) int {
			return cmp.Or(cmp.Compare(a.row.Priority, b.row.Priority), cmp.Compare(a.seq, b.seq))
		})
	} else {
		key := listKey(p.State)
		slices.SortFunc(all, func(a, b *job) int {
			return cmp.Or(key(a).Compare(key(b)), cmp.Compare(a.seq, b.seq))
		})
	}
	if p.Offset < len(all) {
		for _, j := range all[p.Offset:min(p.Offset+limit, len(all))] {
			res.Jobs = append(res.Jobs, j.adminRow())
		}
	}
	return res, nil
}

// JobRetry implements batondriver.JobDriver. The job's errors are kept. A
// retried job is admitted again at once (RunAt now): available, and a
// waiter woken, or parked if its key is busy, whatever its OnBusy. An
// available job is returned as it is; completed, running and parked jobs
// cannot be retried.
func (d *Driver) JobRetry(ctx context.Context, p *batondriver.JobGetParams) (*batondriver.JobRow, error) {
	q, j, unlock, err := d.lockJob(ctx, p.Queue, p.ID)
	if err != nil {
		return nil, err
	}
	defer unlock()
	switch j.row.State {
	case batondriver.JobStateRunning:
		return nil, badParams("job %q is running: it cannot be retried before its attempt ends", p.ID)
	case batondriver.JobStateParked:
		return nil, badParams("job %q is parked: it runs when its key %q has a free slot", p.ID, j.row.Key)
	case batondriver.JobStateCompleted:
		return nil, badParams("job %q completed: only dead, cancelled, dropped and scheduled jobs can be retried", p.ID)
	case batondriver.JobStateAvailable:
		j.row.Attempt = 0 // it keeps its place
	default:
		now := time.Now()
		q.remove(j)
		j.row.Attempt = 0
		j.row.FinishedAt = time.Time{}
		if q.schedule(j, time.Time{}, now) {
			q.wake(1)
		}
		// Queued again: unique while queued or until done, it takes its
		// claim back, unless a twin took it meanwhile (a scheduled job
		// holds its own).
		if s := j.row.UniqueScope; (s == batondriver.UniqueQueued || s == batondriver.UniqueUntilDone) &&
			q.claimOf(j.row.UniqueScope, j.row.Unique, now) == nil {
			q.claim(j, now)
		}
	}
	return j.copyRow(), nil
}

// JobDelete implements batondriver.JobDriver. Deleting an available job
// frees its slot; deleting a parked one may let the next parked job of its
// key in (when their default limits differ). Either promotes in the same
// step. A period claim stays until it lapses; other claims of the job are
// released.
func (d *Driver) JobDelete(ctx context.Context, p *batondriver.JobGetParams) error {
	q, j, unlock, err := d.lockJob(ctx, p.Queue, p.ID)
	if err != nil {
		return err
	}
	defer unlock()
	if j.row.State == batondriver.JobStateRunning {
		return badParams("job %q is running: it cannot be deleted before its attempt ends", p.ID)
	}
	q.remove(j)
	delete(q.jobs, p.ID)
	q.unclaim(j)
	switch j.row.State {
	case batondriver.JobStateAvailable:
		q.wake(q.release(j))
	case batondriver.JobStateParked:
		q.wake(q.promote(q.keys[j.row.Key]))
	}
	return nil
}

// QueueStats implements batondriver.JobDriver. Counts has every state, zeros
// included; an unknown queue has only zeros.
func (d *Driver) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &batondriver.QueueStatsResult{Queue: p.Queue, Counts: make(map[batondriver.JobState]int, len(batondriver.JobStates))}
	for _, st := range batondriver.JobStates {
		res.Counts[st] = 0
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}
	for st, h := range q.states {
		res.Counts[st] = h.Len()
	}
	res.Paused = q.paused
	res.Keys = len(q.keys)
	res.Dropped = q.dropped
	for i := range q.bands {
		if j := q.bands[i].first(); j != nil && (res.OldestAvailable.IsZero() || j.row.RunAt.Before(res.OldestAvailable)) {
			res.OldestAvailable = j.row.RunAt
		}
	}
	return res, nil
}

// QueueList implements batondriver.JobDriver. The names are sorted.
func (d *Driver) QueueList(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name, q := range s.queues {
		if q.used {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names, nil
}

// QueuePause implements batondriver.JobDriver. A queue may be paused before
// it has jobs.
func (d *Driver) QueuePause(ctx context.Context, p *batondriver.QueuePauseParams) error {
	if err := checkQueue(p.Queue); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue(p.Queue)
	if q.paused && p.Resume {
		// Waiters woken while it was paused found nothing to lease.
		q.wake(q.states[batondriver.JobStateAvailable].Len())
	}
	q.paused = !p.Resume
	s.tidy(p.Queue, q)
	return nil
}

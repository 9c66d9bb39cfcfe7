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
	// The page sizes of JobList.
	defaultListLimit = 100
	maxListLimit     = 1000
	// errLeaseExpired is the error recorded for an attempt whose lease
	// expired.
	errLeaseExpired = "lease expired"
)

// jobStates are all states, in the order of a job's life.
var jobStates = []batondriver.JobState{
	batondriver.JobStateScheduled, batondriver.JobStateAvailable, batondriver.JobStateRunning,
	batondriver.JobStateCompleted, batondriver.JobStateCancelled, batondriver.JobStateDead,
}

// jobStore holds every queue's jobs. Its zero value is empty and ready. It
// has a mutex of its own: jobs and locks never wait for each other.
//
// Completed jobs are kept for their retention, dead and cancelled ones for
// the fetches' DeadRetention (or until retried or deleted), and removed by
// later fetches. A queue that ever had a job is remembered, with its paused
// flag and its schedules' last ticks, for the Driver's life.
type jobStore struct {
	mu     sync.Mutex
	queues map[string]*queueState
}

// queueState is one queue: its jobs, indexed by state.
type queueState struct {
	jobs map[string]*job // every job, by ID
	// states holds each state's jobs, ordered for the transition that
	// takes them out of it: scheduled by RunAt (promotion), available by
	// priority then arrival (fetch), running by LeaseUntil (recovery),
	// completed by expiry (sweep), cancelled and dead by FinishedAt.
	states map[batondriver.JobState]*jobHeap
	// byRunAt holds the available jobs again, by RunAt, for
	// OldestAvailable.
	byRunAt *jobHeap
	seq     uint64 // numbers every entry into a state: arrival order
	used    bool   // had a job: listed by QueueList
	paused  bool
	once    map[string]time.Time // recurring schedule name -> last tick inserted

	tokens  int       // unclaimed wake tokens; 0 while anyone waits
	waiters list.List // of *jobWaiter, first come first woken
}

// job is one stored job. Its row is never handed out; callers get copies.
type job struct {
	row      batondriver.JobRow
	seq      uint64    // when it entered its state, in the queue's order
	expireAt time.Time // completed: when it may be swept
	pos      [2]int    // its index in its state's heap and (available) in byRunAt
}

// jobWaiter is one JobWait call. granted is set, and ch signalled, when an
// insert hands it a token.
type jobWaiter struct {
	ch      chan struct{}
	granted bool
}

func newQueueState() *queueState {
	return &queueState{
		jobs: make(map[string]*job),
		states: map[batondriver.JobState]*jobHeap{
			batondriver.JobStateScheduled: {less: timeThenSeq(runAt)},
			batondriver.JobStateAvailable: {less: priorityThenSeq},
			batondriver.JobStateRunning:   {less: timeThenSeq(leaseUntil)},
			batondriver.JobStateCompleted: {less: timeThenSeq(expireAt)},
			batondriver.JobStateCancelled: {less: timeThenSeq(finishedAt)},
			batondriver.JobStateDead:      {less: timeThenSeq(finishedAt)},
		},
		byRunAt: &jobHeap{slot: 1, less: timeThenSeq(runAt)},
	}
}

func runAt(j *job) time.Time       { return j.row.RunAt }
func leaseUntil(j *job) time.Time  { return j.row.LeaseUntil }
func expireAt(j *job) time.Time    { return j.expireAt }
func finishedAt(j *job) time.Time  { return j.row.FinishedAt }
func attemptedAt(j *job) time.Time { return j.row.AttemptedAt }

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
	case batondriver.JobStateScheduled, batondriver.JobStateAvailable:
		return runAt
	case batondriver.JobStateRunning:
		return attemptedAt
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
		heap.Push(q.byRunAt, j)
	}
}

// remove takes j out of its state's indexes (not out of q.jobs).
func (q *queueState) remove(j *job) {
	heap.Remove(q.states[j.row.State], j.pos[0])
	if j.row.State == batondriver.JobStateAvailable {
		heap.Remove(q.byRunAt, j.pos[1])
	}
}

// unlease takes a running job out of running and forgets its lease.
func (q *queueState) unlease(j *job) {
	q.remove(j)
	j.row.Lease, j.row.LeaseUntil = "", time.Time{}
}

// schedule puts j (in no state) in scheduled at at, or, if at is not after
// now, in available with RunAt now. It reports whether j became available.
func (q *queueState) schedule(j *job, at, now time.Time) bool {
	if at.After(now) {
		j.row.RunAt = at
		q.add(j, batondriver.JobStateScheduled)
		return false
	}
	j.row.RunAt = now
	q.add(j, batondriver.JobStateAvailable)
	return true
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
	if !q.used && !q.paused && q.waiters.Len() == 0 && len(q.jobs) == 0 {
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
	if queue == "" {
		return badParams("empty queue name")
	}
	return nil
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

// JobInsert implements batondriver.JobDriver. IDs come from package jobid;
// an available job's RunAt is the time of the insert (a past RunAt is not
// kept). Either every job is inserted or, on invalid params, none.
func (d *Driver) JobInsert(_ context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	for i, in := range p.Jobs {
		switch {
		case in == nil:
			return nil, badParams("job #%d is nil", i)
		case in.Kind == "":
			return nil, badParams("job #%d: empty kind", i)
		case in.Priority < 0 || in.Priority > batondriver.MaxPriority:
			return nil, badParams("job #%d: priority %d out of range 0..%d", i, in.Priority, batondriver.MaxPriority)
		case in.MaxAttempts < 1:
			return nil, badParams("job #%d: MaxAttempts %d, must be at least 1", i, in.MaxAttempts)
		}
	}
	if p.Once != nil && (p.Once.Name == "" || p.Once.Tick.IsZero()) {
		return nil, badParams("Once needs a Name and a Tick")
	}
	res := &batondriver.JobInsertResult{Jobs: make([]*batondriver.JobRow, 0, len(p.Jobs))}
	if len(p.Jobs) == 0 {
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
			res.Skipped = true
			return res, nil
		}
		q.once[p.Once.Name] = p.Once.Tick
	}
	q.used = true
	woken := 0
	var earliest time.Time // of the scheduled jobs before this insert
	if j := q.states[batondriver.JobStateScheduled].first(); j != nil {
		earliest = j.row.RunAt
	}
	for _, in := range p.Jobs {
		j := &job{row: batondriver.JobRow{
			ID:          jobid.New(),
			Queue:       p.Queue,
			Kind:        in.Kind,
			Args:        bytes.Clone(in.Args),
			Priority:    in.Priority,
			MaxAttempts: in.MaxAttempts,
			Tags:        slices.Clone(in.Tags),
			Metadata:    bytes.Clone(in.Metadata),
			CreatedAt:   now,
		}}
		q.jobs[j.row.ID] = j
		if q.schedule(j, in.RunAt, now) {
			woken++
		}
		res.Jobs = append(res.Jobs, j.copyRow())
	}
	// A job due before every other scheduled one wakes a fetcher, so that
	// it learns the new NextRunAt instead of sleeping through it.
	if j := q.states[batondriver.JobStateScheduled].first(); j != nil && (earliest.IsZero() || j.row.RunAt.Before(earliest)) {
		woken++
	}
	q.wake(woken)
	return res, nil
}

// JobFetch implements batondriver.JobDriver. Before leasing, it makes up to
// 100 due jobs available, takes back up to 100 expired leases and removes up
// to 100 completed jobs past their retention, paused or not. A job taken
// back gets the error "lease expired" for the attempt, whether it runs
// again or is dead. Unless the queue is paused, jobs it made available and
// did not lease wake other fetchers, and a fetch that empties the available
// jobs drops the queue's unclaimed wake tokens: nobody would find a job.
func (d *Driver) JobFetch(_ context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if p.Max < 1 || p.LeaseTTL < time.Millisecond || p.RecoverDelay < 0 || p.DeadRetention < 0 {
		return nil, badParams("fetch Max %d (at least 1), LeaseTTL %v (at least 1ms), RecoverDelay %v and DeadRetention %v (not negative)", p.Max, p.LeaseTTL, p.RecoverDelay, p.DeadRetention)
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	res := &batondriver.JobFetchResult{}
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}

	made := 0 // jobs made available
	scheduled := q.states[batondriver.JobStateScheduled]
	for range fetchBatch {
		j := scheduled.first()
		if j == nil || j.row.RunAt.After(now) {
			break
		}
		q.remove(j)
		q.add(j, batondriver.JobStateAvailable) // keeps RunAt: when it became due
		made++
	}
	running := q.states[batondriver.JobStateRunning]
	for range fetchBatch {
		j := running.first()
		if j == nil || j.row.LeaseUntil.After(now) {
			break
		}
		q.unlease(j)
		j.fail(now, errLeaseExpired)
		if j.row.Attempt >= j.row.MaxAttempts {
			q.end(j, batondriver.JobStateDead, now)
		} else if q.schedule(j, now.Add(p.RecoverDelay), now) {
			made++
		}
		res.Recovered++
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
	if p.DeadRetention > 0 {
		for _, state := range []batondriver.JobState{batondriver.JobStateDead, batondriver.JobStateCancelled} {
			ended := q.states[state]
			for range fetchBatch {
				j := ended.first()
				if j == nil || j.row.FinishedAt.After(now.Add(-p.DeadRetention)) {
					break
				}
				q.remove(j)
				delete(q.jobs, j.row.ID)
			}
		}
	}
	if j := scheduled.first(); j != nil {
		res.NextRunAt = j.row.RunAt
	}
	if q.paused {
		res.Paused = true
		return res, nil
	}

	available := q.states[batondriver.JobStateAvailable]
	for len(res.Jobs) < p.Max && available.Len() > 0 {
		j := available.first()
		q.remove(j)
		j.row.Attempt++
		j.row.AttemptedAt = now
		j.row.Lease = newLease()
		j.row.LeaseUntil = now.Add(p.LeaseTTL)
		q.add(j, batondriver.JobStateRunning)
		res.Jobs = append(res.Jobs, j.copyRow())
	}
	if len(res.Jobs) < p.Max {
		q.tokens = 0
	} else if made > 0 {
		q.wake(min(made, available.Len()))
	}
	return res, nil
}

// JobWait implements batondriver.JobDriver. Each wake token (one per job
// made available outside a fetch's own leasing, at most 1000 unclaimed)
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
// never extended, even before a fetch takes its job back.
func (d *Driver) JobExtend(_ context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
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
		j.row.LeaseUntil = now.Add(p.TTL)
		heap.Fix(q.states[batondriver.JobStateRunning], j.pos[0])
	}
	return res, nil
}

// JobFinish implements batondriver.JobDriver. A lease that has expired is
// stale even before a fetch takes its job back. The Error of a retry, cancel
// or dead outcome is recorded even when empty; a Retry or Snooze whose RunAt
// is not in the future makes the job available at once (RunAt now) and
// wakes a waiter.
func (d *Driver) JobFinish(_ context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if p.Retention < 0 {
		return nil, badParams("negative Retention %v", p.Retention)
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
			batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead:
		default:
			return nil, badParams("outcome #%d: unknown outcome %q", i, f.Outcome)
		}
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	res := &batondriver.JobFinishResult{}
	q := s.queues[p.Queue]
	woken := 0
	for _, f := range p.Finished {
		j := q.held(f.ID, f.Lease, now)
		if j == nil {
			res.Stale = append(res.Stale, f.ID)
			continue
		}
		q.unlease(j)
		switch f.Outcome {
		case batondriver.JobOutcomeCompleted:
			if p.Retention == 0 {
				delete(q.jobs, f.ID)
				continue
			}
			j.expireAt = now.Add(p.Retention)
			q.end(j, batondriver.JobStateCompleted, now)
		case batondriver.JobOutcomeRetry:
			j.fail(now, f.Error)
			if j.row.Attempt >= j.row.MaxAttempts {
				q.end(j, batondriver.JobStateDead, now)
			} else if q.schedule(j, f.RunAt, now) {
				woken++
			}
		case batondriver.JobOutcomeSnooze:
			j.row.Attempt--
			if q.schedule(j, f.RunAt, now) {
				woken++
			}
		case batondriver.JobOutcomeCancel:
			j.fail(now, f.Error)
			q.end(j, batondriver.JobStateCancelled, now)
		case batondriver.JobOutcomeDead:
			j.fail(now, f.Error)
			q.end(j, batondriver.JobStateDead, now)
		}
	}
	if woken > 0 {
		q.wake(woken)
	}
	return res, nil
}

// JobGet implements batondriver.JobDriver.
func (d *Driver) JobGet(_ context.Context, p *batondriver.JobGetParams) (*batondriver.JobRow, error) {
	if err := checkJob(p.Queue, p.ID); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.queues[p.Queue]; q != nil {
		if j := q.jobs[p.ID]; j != nil {
			return j.copyRow(), nil
		}
	}
	return nil, notFound(p.Queue, p.ID)
}

// JobList implements batondriver.JobDriver. Scheduled and available jobs
// are listed by RunAt, running ones by AttemptedAt, the others by
// FinishedAt. A Limit of 0 means 100. Each call sorts the state's jobs.
func (d *Driver) JobList(_ context.Context, p *batondriver.JobListParams) (*batondriver.JobListResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if !slices.Contains(jobStates, p.State) {
		return nil, badParams("unknown job state %q", p.State)
	}
	if p.Limit < 0 || p.Limit > maxListLimit || p.Offset < 0 {
		return nil, badParams("list Limit %d (0 to %d), Offset %d (not negative)", p.Limit, maxListLimit, p.Offset)
	}
	limit := p.Limit
	if limit == 0 {
		limit = defaultListLimit
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	res := &batondriver.JobListResult{}
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}
	all := slices.Clone(q.states[p.State].jobs)
	res.Total = len(all)
	key := listKey(p.State)
	slices.SortFunc(all, func(a, b *job) int {
		if c := key(a).Compare(key(b)); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	if p.Offset < len(all) {
		for _, j := range all[p.Offset:min(p.Offset+limit, len(all))] {
			res.Jobs = append(res.Jobs, j.copyRow())
		}
	}
	return res, nil
}

// JobRetry implements batondriver.JobDriver. The job's errors are kept. An
// available job keeps its place and only has its attempts reset; a
// completed job cannot be retried.
func (d *Driver) JobRetry(_ context.Context, p *batondriver.JobGetParams) (*batondriver.JobRow, error) {
	if err := checkJob(p.Queue, p.ID); err != nil {
		return nil, err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil || q.jobs[p.ID] == nil {
		return nil, notFound(p.Queue, p.ID)
	}
	j := q.jobs[p.ID]
	switch j.row.State {
	case batondriver.JobStateRunning:
		return nil, badParams("job %q is running: it cannot be retried before its attempt ends", p.ID)
	case batondriver.JobStateCompleted:
		return nil, badParams("job %q completed: only dead, cancelled and scheduled jobs can be retried", p.ID)
	case batondriver.JobStateAvailable:
		j.row.Attempt = 0
	default:
		q.remove(j)
		j.row.Attempt = 0
		j.row.FinishedAt = time.Time{}
		q.schedule(j, time.Time{}, time.Now())
		q.wake(1)
	}
	return j.copyRow(), nil
}

// JobDelete implements batondriver.JobDriver.
func (d *Driver) JobDelete(_ context.Context, p *batondriver.JobGetParams) error {
	if err := checkJob(p.Queue, p.ID); err != nil {
		return err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil || q.jobs[p.ID] == nil {
		return notFound(p.Queue, p.ID)
	}
	j := q.jobs[p.ID]
	if j.row.State == batondriver.JobStateRunning {
		return badParams("job %q is running: it cannot be deleted before its attempt ends", p.ID)
	}
	q.remove(j)
	delete(q.jobs, p.ID)
	return nil
}

// QueueStats implements batondriver.JobDriver. Counts has every state, zeros
// included; an unknown queue has only zeros.
func (d *Driver) QueueStats(_ context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	res := &batondriver.QueueStatsResult{Queue: p.Queue, Counts: make(map[batondriver.JobState]int, len(jobStates))}
	for _, st := range jobStates {
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
	if j := q.byRunAt.first(); j != nil {
		res.OldestAvailable = j.row.RunAt
	}
	return res, nil
}

// QueueList implements batondriver.JobDriver. The names are sorted.
func (d *Driver) QueueList(context.Context) ([]string, error) {
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
func (d *Driver) QueuePause(_ context.Context, p *batondriver.QueuePauseParams) error {
	if err := checkQueue(p.Queue); err != nil {
		return err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue(p.Queue)
	q.paused = !p.Resume
	s.tidy(p.Queue, q)
	return nil
}

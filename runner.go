package baton

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// runner is a started client: it fetches jobs while it has free workers,
// runs them, keeps their leases alive and records their outcomes in batches.
type runner struct {
	c   *Client
	cfg *config
	log *slog.Logger

	fetchCtx    context.Context // ends when Stop begins: no more fetching or firing
	cancelFetch context.CancelFunc
	loops       sync.WaitGroup // dispatcher, wakers and schedules
	wake        chan struct{}  // cap 1: an insert may have made jobs available

	mu       sync.Mutex
	dueAt    time.Time // earliest RunAt of a retry or snooze this process recorded
	running  map[execKey]*execution
	free     int             // workers not running a job
	fetching int             // of those, how many a fetch in flight asks jobs for
	changed  chan struct{}   // closed and replaced when free grows
	full     context.Context // cancelled when free falls to 0, replaced when it grows
	fullNow  context.CancelFunc
	stopping bool // Stop waits for the executions: start no more
	// shares are the capped queues' parts of the pool (QueueConfig.MaxWorkers).
	shares map[string]*queueShare

	// The recalls of chained jobs heard (notice.go): by key, and when each
	// queue's listener last rechecked; listening: the queues whose
	// notices are heard, the only ones asked for chained jobs.
	recalls   map[recallKey]recall
	rechecked map[string]time.Time
	listening map[string]bool
	listened  sync.WaitGroup // done as each queue's first try to listen ends
	// cancels are the cancel notices heard for jobs that were not running
	// here: a call still out may bring them (notice.go).
	cancels map[execKey]time.Time
	// givingBack counts the calls giving back chained jobs recalled or
	// cancelled (notice.go); Stop waits for them.
	givingBack sync.WaitGroup

	// recording are the outcomes handed to the completer and not recorded
	// yet, each with its execution, gone from running: the heartbeat
	// renews their leases until the call that records them has returned
	// (or they are given up), so that a job whose handler has returned is
	// not taken back, to run again, while its outcome waits for a call
	// slot of the completer or for the retry of a call that failed.
	// Guarded by mu.
	recording map[*batondriver.JobFinish]*execution

	execs    sync.WaitGroup
	finishes chan *finishItem
	finished chan struct{} // closed when the completer has drained
	hbStop   chan struct{}
	hbDone   chan struct{}
	// giveUp ends when Stop's context does: calls whose effects must be
	// seen through — a fetch in flight, outcomes — stop waiting or retrying.
	giveUp       context.Context
	cancelGiveUp context.CancelFunc
	abandoned    atomic.Bool // some outcomes were given up

	// backoffs are the queues whose last fetch failed, each asked again
	// after its own back-off; only the dispatcher uses them.
	backoffs map[string]*fetchBackoff
	// upkeepAt is, per queue, when a round next owes it a fetch for no job
	// (the pool full, or the queue with its whole share,
	// QueueConfig.MaxWorkers): its earliest
	// scheduled job's time as its last fetch saw it, or a PollInterval
	// after that fetch (expired leases), whichever comes first.
	upkeepAt map[string]time.Time

	// beater keeps this process in the list of live processes
	// (process.go), from Start until Stop returns.
	beater *beater
}

// fetchBackoff is when the dispatcher asks a queue whose fetches fail
// again, and how long it waits after the next failure.
type fetchBackoff struct {
	at   time.Time
	wait time.Duration
}

type execKey struct{ queue, id string }

// execution is one running attempt.
type execution struct {
	queue  string
	row    *JobRow
	ctx    context.Context
	cancel context.CancelCauseFunc
	until  time.Time // guarded by runner.mu: the lease is trusted until then
	expiry *time.Timer
	// giveUp is when the heartbeat stops renewing the lease of a handler
	// that ignores its timeout (zero: never); guarded by runner.mu.
	giveUp time.Time
	// next is the job chained behind this one (see chain), to run on the
	// same worker once this handler returns; guarded by runner.mu.
	next *JobRow
	// nextSent is when the call that leased next was sent (recalled);
	// guarded by runner.mu.
	nextSent time.Time
	// followed is the execution of that job, once started (follow), under
	// this one's lease; guarded by runner.mu.
	followed *execution
	// chainDone, if not nil, is closed when the finish that may chain a job
	// behind this one has returned: this one started chained, and the
	// outcome of the job ahead of it, recorded with Chain, may bring it.
	chainDone chan struct{}
	// returned: the handler has returned, and the execution waits for
	// chainDone, still in runner.running so that the heartbeat renews the
	// lease that the job chained behind it will run under; lost: the
	// backend reported the lease lost (the context may have ended before).
	// Both guarded by runner.mu.
	returned, lost bool
}

type finishItem struct {
	queue string
	f     *batondriver.JobFinish
	// slot: the worker that ran the job is handed to the completer, which
	// leases the next jobs for it in the same call (handoff).
	slot bool
	// chained is the execution of the job chained behind this one, started
	// when this one returned: the finish may chain a job behind it in turn,
	// and closes its chainDone once it returns.
	chained *execution
}

// Start begins working the configured queues with Config.Concurrency
// workers, and records the process in the list of live processes
// (ProcessList), renewing its record every Config.ProcessTTL/3. It
// returns at once; Stop ends it. ctx carries values to the handlers'
// contexts; its cancellation does not stop the client.
func (c *Client) Start(ctx context.Context) error {
	if c.cfg.Workers == nil || len(c.cfg.Workers.kinds) == 0 {
		return errors.New("baton: Start: no workers registered (Config.Workers)")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runner != nil {
		return errors.New("baton: Start: already started")
	}
	c.warnUnworkedKinds()
	fetchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	giveUp, cancelGiveUp := context.WithCancel(context.WithoutCancel(ctx))
	r := &runner{
		c: c, cfg: c.cfg, log: c.cfg.Logger,
		fetchCtx: fetchCtx, cancelFetch: cancel,
		wake:     make(chan struct{}, 1),
		running:  make(map[execKey]*execution),
		backoffs: make(map[string]*fetchBackoff),
		upkeepAt: make(map[string]time.Time),
		free:     c.cfg.Concurrency,
		shares:   newShares(c.cfg.Queues),
		changed:  make(chan struct{}),
		finishes: make(chan *finishItem, c.cfg.Concurrency),
		finished: make(chan struct{}),
		hbStop:   make(chan struct{}),
		hbDone:   make(chan struct{}),
		giveUp:   giveUp, cancelGiveUp: cancelGiveUp,
		beater: newBeater(c.cfg),
	}
	r.full, r.fullNow = context.WithCancel(context.Background())
	r.recording = make(map[*batondriver.JobFinish]*execution)
	r.recalls, r.rechecked, r.listening = make(map[recallKey]recall), make(map[string]time.Time), make(map[string]bool)
	r.cancels = make(map[execKey]time.Time)
	c.runner = r
	r.loops.Add(1 + 2*len(c.cfg.Queues) + len(c.cfg.PeriodicJobs))
	r.listened.Add(len(c.cfg.Queues))
	for _, q := range c.cfg.Queues {
		go r.listen(q.Name)
	}
	go r.dispatch()
	for _, q := range c.cfg.Queues {
		go r.waker(q.Name)
	}
	found := r.findSchedules()
	started := time.Now()
	for _, p := range c.cfg.PeriodicJobs {
		go r.schedule(p, found, started)
	}
	go r.complete()
	go r.heartbeat()
	go r.beat()
	return nil
}

// Stop stops fetching (a fetch already sent is seen through, and its jobs
// run), waits for running jobs until ctx ends, then cancels the handlers
// still running (their context's cause is ErrStopping) and gives their
// jobs back without counting the attempt, each to its place: a keyed job
// keeps its key's slot, so the next client runs it before the key's other
// jobs. Stop returns once every outcome is recorded: nil if every handler
// returned in time, else ctx's error, which it also returns if the backend
// could not be reached to record them (those jobs run again after their
// leases expire); a call to the backend in flight is waited for at most
// LeaseTTL. A handler that ignores its context delays Stop. Last, on a
// backend over a network, it gives back the jobs that calls whose replies
// were lost had leased, waiting for the backend as long as a fetch would
// (at most 5s) and not past ctx; jobs it cannot give back run again when
// their leases expire. The process stays in the list of live processes
// (ProcessList) meanwhile, marked stopping, and is removed from it at the
// very end, once a beat on its way has its reply (it waits at most
// ProcessTTL/3 and 5s), the removal waited for at most 1s, even past ctx:
// a record not removed drops out Config.ProcessTTL after its last beat.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	r := c.runner
	c.runner = nil
	c.mu.Unlock()
	if r == nil {
		return errors.New("baton: Stop: not started")
	}
	stopGiveUp := context.AfterFunc(ctx, r.cancelGiveUp)
	defer stopGiveUp()
	defer r.cancelGiveUp()
	r.cancelFetch()
	r.loops.Wait()
	r.mu.Lock()
	r.stopping = true // the completer leases no more (see start)
	r.mu.Unlock()

	done := make(chan struct{})
	go func() { r.execs.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		r.mu.Lock()
		for _, e := range r.running {
			e.cancel(ErrStopping)
		}
		r.mu.Unlock()
		<-done
	}
	close(r.finishes)
	<-r.finished
	r.givingBack.Wait()
	r.settleLost()
	close(r.hbStop)
	<-r.hbDone
	r.stopBeating()
	if err == nil && r.abandoned.Load() {
		err = fmt.Errorf("baton: Stop: job outcomes not recorded: %w", context.Cause(ctx))
	}
	return err
}

// settleLost makes a finish with no outcomes to each queue: a backend that
// gives back the jobs leased by calls whose replies were lost does so with
// the instance's next fetch or finish of the queue (batondriver.JobDriver),
// and after Stop there would be none, so those jobs would wait for their
// leases to expire. The queues' calls go out at once and are waited for at
// most leaseWait altogether, and not past Stop's context.
func (r *runner) settleLost() {
	if r.giveUp.Err() != nil {
		return // no call could be sent
	}
	ctx, cancel := context.WithTimeout(r.giveUp, r.leaseWait())
	defer cancel()
	var wg sync.WaitGroup
	for _, q := range r.cfg.Queues {
		wg.Go(func() {
			_, err := r.c.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: q.Name, Retention: r.cfg.CompletedRetention})
			if err != nil {
				r.log.Warn("baton: jobs leased by calls whose replies were lost could not be given back; they run again when their leases expire",
					"queue", q.Name, "err", err)
			}
		})
	}
	wg.Wait()
}

// freeWorkers is how many workers have no job.
func (r *runner) freeWorkers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.free
}

// spareWorkers counts the free workers that no fetch in flight asks jobs
// for.
func (r *runner) spareWorkers() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.free - r.fetching
}

// slotChanged returns a channel closed when a worker is next freed.
func (r *runner) slotChanged() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// poolFull returns a context cancelled once no worker is free (already if
// none is now).
func (r *runner) poolFull() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full
}

// order returns the queues in the order to ask them this round: as
// configured with StrictPriority, else a weighted random order.
func (r *runner) order() []string {
	qs := r.cfg.Queues
	out := make([]string, 0, len(qs))
	if r.cfg.StrictPriority || len(qs) == 1 {
		for _, q := range qs {
			out = append(out, q.Name)
		}
		return out
	}
	weights := append([]int(nil), r.cfg.weights...)
	names := make([]string, len(qs))
	total := 0
	for i, q := range qs {
		names[i] = q.Name
		total += weights[i]
	}
	for len(names) > 0 {
		pick := rand.IntN(total)
		i := 0
		for ; pick >= weights[i]; i++ {
			pick -= weights[i]
		}
		out = append(out, names[i])
		total -= weights[i]
		names = append(names[:i], names[i+1:]...)
		weights = append(weights[:i], weights[i+1:]...)
	}
	return out
}

// dispatch fetches while workers are free: when woken by an insert, when a
// worker frees up, when a scheduled job comes due, and at the safety poll.
func (r *runner) dispatch() {
	defer r.loops.Done()
	// The first fetches may chain jobs: not before the recalls are heard.
	if !r.cfg.DisableChaining {
		r.listened.Wait()
	}
	for r.fetchCtx.Err() == nil {
		// Taken before the round: a worker freed during it wakes the next.
		freed := r.slotChanged()
		busy := r.freeWorkers() == 0
		next, more := r.fetchRound(busy)
		if more && r.freeWorkers() > 0 {
			continue // a queue had more jobs than were asked for
		}
		r.mu.Lock()
		if !r.dueAt.IsZero() && (next.IsZero() || r.dueAt.Before(next)) {
			next = r.dueAt
		}
		r.dueAt = time.Time{}
		r.mu.Unlock()
		wait := r.cfg.PollInterval
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), time.Millisecond))
		}
		timer := time.NewTimer(wait)
		if !busy && !more && r.freeWorkers() > 0 {
			// Idle workers learn of new jobs from the wakers. Not when a
			// queue had more jobs than it was asked for: those woke nobody,
			// so a worker freed since must start the next round.
			freed = nil
		}
		select {
		case <-r.wake:
		case <-freed:
		case <-timer.C:
		case <-r.fetchCtx.Done():
		}
		timer.Stop()
	}
}

// fetchRound asks the queues in order for as many jobs as there are free
// workers, each at most for its share (QueueConfig.MaxWorkers). With none
// free when the round began (upkeep) it still fetches, for no job, and so
// it does for a queue that has its whole share, each queue once its
// upkeep is due (upkeepAt): the finishes hand busy workers their next
// jobs, but only a fetch admits due jobs, takes back expired leases and
// sweeps. It returns
// the earliest scheduled time seen (or time to ask again a queue whose
// fetch failed) and whether a queue had more jobs available than it was
// asked for. A queue whose fetch failed is asked again only after a
// back-off of its own, doubling up to 5s: meanwhile the rounds ask the
// other queues, which a queue that cannot be reached (its Redis Cluster
// node down) must not hold up, also behind it in StrictPriority.
func (r *runner) fetchRound(upkeep bool) (next time.Time, more bool) {
	// A round that begins with no free worker (upkeep) fetches no job from
	// any queue, even if a worker frees meanwhile: that wakes the next
	// round, which asks the queues in order (StrictPriority).
	for _, queue := range r.order() {
		free, room := 0, 0
		full := upkeep
		if !upkeep {
			free, room = r.workersFor(queue)
			if free == 0 {
				return next, more // this round's fetches took every worker
			}
			// A queue with its whole share (MaxWorkers) leases nothing:
			// the free workers go to the others, and a worker of its that
			// frees wakes the next round. It still has its upkeep, as in a
			// full pool: working alone, its workers are handed their next
			// jobs by finishes, which admit no due job.
			full = room == 0
		}
		// An upkeep fetch only when due, not at every round the other
		// queues' workers make.
		if at := r.upkeepAt[queue]; full && time.Now().Before(at) {
			next = earliest(next, at)
			continue
		}
		if r.fetchCtx.Err() != nil {
			return next, more
		}
		b := r.backoffs[queue]
		if b != nil && time.Now().Before(b.at) {
			next = earliest(next, b.at)
			continue
		}
		// A fetch leases its jobs: once sent, it is seen through even if
		// Stop begins, and its jobs run (or go back when Stop cuts them
		// off) instead of waiting out their leases as nobody's, their
		// attempt counted. A reply after leaseWait would come too late.
		ctx, cancel := context.WithTimeout(r.giveUp, r.leaseWait())
		asked := min(room, 100)
		r.mu.Lock()
		r.fetching += asked // spoken for: no chain counts them free (follow)
		r.mu.Unlock()
		sent := time.Now()
		res, err := r.c.driver.JobFetch(ctx, &batondriver.JobFetchParams{
			Queue: queue, Max: asked, LeaseTTL: r.cfg.LeaseTTL, RecoverDelay: r.cfg.RecoverDelay,
			DeadRetention: r.cfg.DeadRetention, DroppedRetention: max(r.cfg.CompletedRetention, time.Millisecond),
			Chain: r.chain(queue, free-1), // a worker left once this fetch leased one
		})
		cancel()
		r.mu.Lock()
		r.fetching -= asked
		r.mu.Unlock()
		if err != nil {
			if r.fetchCtx.Err() == nil {
				r.log.Warn("baton: fetch failed; backing off", "queue", queue, "err", err)
			}
			if b == nil {
				b = &fetchBackoff{wait: 10 * time.Millisecond}
				r.backoffs[queue] = b
			}
			b.at = time.Now().Add(b.wait)
			b.wait = min(2*b.wait, 5*time.Second)
			next = earliest(next, b.at)
			continue
		}
		delete(r.backoffs, queue)
		due := nextRunAt(res)
		r.upkeepAt[queue] = earliest(due, time.Now().Add(r.cfg.PollInterval))
		if !full || upkeep {
			more = more || res.More // a full queue's jobs wait for its workers
		}
		if res.Recovered > 0 {
			r.log.Info("baton: took back jobs whose leases expired", "queue", queue, "count", res.Recovered)
		}
		next = earliest(next, due)
		// What comes back here is the jobs whose cancel was heard while
		// the fetch was out (a fetch chains jobs only behind the jobs it
		// leases, which launch starts first, and the dispatcher is done
		// before Stop sets stopping). Their call goes out aside: retried
		// while the queue's backend cannot be reached, it must hold up
		// neither the rounds nor the other queues.
		if _, back := r.launch(queue, res.Jobs, sent, false); len(back) > 0 {
			r.giveBackAside(queue, back)
		}
		if res.More && !full {
			// The queue has more jobs than it was asked for: a worker
			// freed meanwhile goes to it in the next round, not to the
			// queues after it (StrictPriority; a weighted order is drawn
			// again).
			return next, more
		}
	}
	return next, more
}

// earliest is the earlier of a and b, a zero time being none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// waker waits for inserts into queue while the pool has free workers that
// the queue may take (QueueConfig.MaxWorkers), and wakes the dispatcher.
// JobWait hands each insert's wake-up to one waiter in the whole system,
// so a busy process does not take it: a wait is cancelled once the pool
// fills (a fetch for another queue, say), or the queue has its whole
// share, leaving the next wake-up to the other processes.
func (r *runner) waker(queue string) {
	defer r.loops.Done()
	backoff := 10 * time.Millisecond
	for r.fetchCtx.Err() == nil {
		// Taken before the look: a worker freed after it ends the wait.
		freed := r.slotChanged()
		if _, room := r.workersFor(queue); room == 0 {
			select {
			case <-freed:
			case <-r.fetchCtx.Done():
				return
			}
			continue
		}
		ctx, cancel := context.WithCancel(r.fetchCtx)
		stop := context.AfterFunc(r.poolFull(), cancel)
		stopQueue := context.AfterFunc(r.queueFull(queue), cancel)
		err := r.c.driver.JobWait(ctx, &batondriver.JobWaitParams{Queue: queue, Timeout: r.cfg.PollInterval})
		filled := ctx.Err() != nil
		stop()
		stopQueue()
		cancel()
		if err != nil {
			if r.fetchCtx.Err() != nil {
				return
			}
			if filled {
				continue // the pool filled: wait for a free worker again
			}
			if !r.backOff(&backoff) {
				return
			}
			continue
		}
		backoff = 10 * time.Millisecond
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

// backOff waits *wait after a failed call of a loop, and doubles it, up to
// 5s, for the next failure. It reports false if Stop began meanwhile.
func (r *runner) backOff(wait *time.Duration) bool {
	select {
	case <-time.After(*wait):
	case <-r.fetchCtx.Done():
		return false
	}
	*wait = min(2**wait, 5*time.Second)
	return true
}

// leaseMargin is how much earlier than the backend a worker considers a
// lease over (as in batonlock: 1% plus 2ms).
func leaseMargin(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// maxLeaseWait bounds how long a call that leases jobs (a fetch, or a
// finish that fetches or chains) waits for its reply: a fetch takes well
// under a millisecond, so one this slow waited behind a stalled server.
// It is below the Redis client's usual connection timeouts (rueidis cuts a
// connection whose writes wait 10s by default), so that the call gives up
// first: the backend, told when its caller stopped waiting, leases nothing
// in a call that runs later (batondriver.JobDriver.JobFetch).
const maxLeaseWait = 5 * time.Second

// leaseWait is how long a call that leases jobs waits for its reply: at
// most until the leases it brings would be over by the worker's reckoning
// (launch), and at most maxLeaseWait.
func (r *runner) leaseWait() time.Duration {
	return min(r.cfg.LeaseTTL-leaseMargin(r.cfg.LeaseTTL), maxLeaseWait)
}

// launch starts the jobs a fetch or finish sent at sent leased: each on a
// free worker or, if reserved, on one of the workers handed to the
// completer. It makes each chained job the next job of the one it is
// chained behind: one of these, or one in running, which has not yet
// looked for its next job (follow). A chained execution whose chainDone
// the caller closes next is there while it waits for it; once it has
// gone on without (its lease lost, or its wait for the finish run out) it
// is not, and a job chained behind it would run on no worker.
//
// It returns how many jobs it started, and the outcomes that give back the
// jobs it cannot run, for the caller to record: the leased ones once Stop
// waits for the executions, and the chained ones then too (the outcome of
// the job ahead would unchain them only once it returns), or whose job
// ahead is not here (it returned before they came, or has a job chained
// already), or that a recall heard while the call was out names
// (notice.go), or whose cancel was heard while the call was out (they end
// cancelled). Given back, a job runs again at once (a recalled one when
// its key's limit lets it), its attempt not counted.
//
// The job ahead must be here under the lease the chain was made behind:
// an execution of the same job under a later lease (its earlier one
// taken back meanwhile, by the settling of a call whose reply was lost,
// then leased to this process again) has a fence above the chained job's,
// and the backend has put the chained job back at the head of its key's
// parked jobs. Run behind it, the chained job would run under a lease
// taken back, beside its next lease (see ahead).
func (r *runner) launch(queue string, rows []*JobRow, sent time.Time, reserved bool) (int, []*batondriver.JobFinish) {
	until := sent.Add(r.cfg.LeaseTTL - leaseMargin(r.cfg.LeaseTTL))
	var es []*execution
	var back []*batondriver.JobFinish
	r.mu.Lock()
	for _, row := range rows {
		if row.After != "" {
			continue
		}
		if r.stopping || r.cancelHeard(queue, row.ID, sent) {
			back = append(back, giveBack(row))
			continue
		}
		if !reserved {
			r.free--
			if r.free == 0 {
				r.fullNow()
			}
			r.take(queue)
		}
		es = append(es, r.track(queue, row, until))
	}
	for _, row := range rows {
		if row.After == "" {
			continue
		}
		e := r.running[execKey{queue, row.After}]
		if e == nil || !ahead(e.row, row) || e.next != nil || r.stopping || r.recalled(queue, row, sent) ||
			r.cancelHeard(queue, row.ID, sent) {
			back = append(back, giveBack(row))
			continue
		}
		e.next, e.nextSent = row, sent
	}
	r.mu.Unlock()
	for _, e := range es {
		go r.execute(e)
	}
	return len(es), back
}

// nextRunAt is when, by this process's clock, the earliest scheduled job
// of a fetch's queue becomes due: as far from the fetch's reply as it is
// from the backend's clock at the fetch. The backend's time read on this
// process's clock would be off by the difference of the two clocks: a
// client ahead of a server (or a server's clock stepped back) would find
// the job due while the server does not, and fetch again every
// millisecond until the server agreed.
func nextRunAt(res *batondriver.JobFetchResult) time.Time {
	if res.NextRunAt.IsZero() || res.Now.IsZero() {
		return res.NextRunAt
	}
	return time.Now().Add(res.NextRunAt.Sub(res.Now))
}

// ahead reports whether the chained job row was chained behind a, a lease
// of the job ahead (row.After): fencing tokens rise with every lease of a
// key, so a chained job's is above that of the lease it was chained behind
// and below that of any later lease of the job ahead
// (batondriver.JobFetchParams.Chain).
func ahead(a, row *JobRow) bool {
	return row.Fence > a.Fence
}

// giveBack is the outcome that returns a leased job that will not run to its
// place (batondriver.JobFinish.GiveBack), its attempt not counted.
func giveBack(row *JobRow) *batondriver.JobFinish {
	return &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: row.ID, Lease: row.Lease}, Outcome: batondriver.JobOutcomeSnooze,
		GiveBack: true}
}

// track records an execution of row whose lease is trusted until until.
// An execution of the same job under an earlier lease that still runs
// here has lost it, since the backend leased the job anew: it is cancelled
// (ErrLeaseLost) at once. Taken out of running, it would no longer be
// renewed, and so not hear of the loss at the next heartbeat, but run on
// to its own until beside the new one; that happens when the backend's
// clock jumps forward past the lease. r.mu is held; the caller runs it.
func (r *runner) track(queue string, row *JobRow, until time.Time) *execution {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.fetchCtx))
	e := &execution{queue: queue, row: row, ctx: ctx, cancel: cancel, until: until}
	e.expiry = time.AfterFunc(time.Until(until), func() { r.expire(e) })
	k := execKey{queue, row.ID}
	if old := r.running[k]; old != nil && old.row.Lease != row.Lease {
		old.lost = true
		old.cancel(ErrLeaseLost)
	}
	r.running[k] = e
	r.execs.Add(1) // under mu: never after Stop began waiting (stopping)
	return e
}

// untrack removes e from running, unless a later lease of its job has
// taken its place there: a handler that ran on after its lease was lost,
// while the backend leased the job to this process again, must not take
// the new execution out of the heartbeat's reach. r.mu is held.
func (r *runner) untrack(e *execution) {
	k := execKey{e.queue, e.row.ID}
	if r.running[k] == e {
		delete(r.running, k)
	}
}

// expire cancels a job whose lease could not be confirmed in time.
func (r *runner) expire(e *execution) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if left := time.Until(e.until); left > 0 {
		e.expiry.Reset(left)
		return
	}
	e.cancel(ErrLeaseLost)
}

// execute runs an attempt, then each job chained behind the one before on
// the same worker.
func (r *runner) execute(e *execution) {
	for e != nil {
		e = r.executeOne(e)
	}
}

// executeOne runs one attempt and hands its outcome to the completer. It
// returns the execution of the job chained behind it, started at once on
// the same worker, or nil.
func (r *runner) executeOne(e *execution) *execution {
	defer r.execs.Done()
	row := e.row
	timeout := r.cfg.attemptTimeout(row.Kind)
	if timeout > 0 {
		r.mu.Lock()
		e.giveUp = time.Now().Add(timeout + r.cfg.LeaseTTL)
		r.mu.Unlock()
	}
	f, _ := r.cfg.attempt(e.ctx, e.queue, row, timeout)

	// Waiting for the finish of the job ahead of this one (below), the
	// execution stays in running, so that the heartbeat renews its lease
	// (and the job ahead's): the job that finish may chain behind it runs
	// under that lease, and no handler of the chain runs meanwhile to have
	// it renewed.
	wait := f != nil && e.chainDone != nil
	r.mu.Lock()
	e.returned = true
	if !wait {
		r.untrack(e)
	}
	e.expiry.Stop()
	r.mu.Unlock()
	e.cancel(nil)
	if wait {
		// The finish of the job ahead of this one, in flight (one call at
		// most), may chain a job behind this one: wait for it, which also
		// records this outcome after that one. That call closes chainDone
		// whatever its result; the bound only keeps a worker from waiting
		// forever should it not.
		select {
		case <-e.chainDone:
		default:
			t := time.NewTimer(r.cfg.LeaseTTL)
			select {
			case <-e.chainDone:
			case <-t.C:
				r.log.Error("baton: a finish never reported; freeing its worker", "job_id", row.ID, "queue", e.queue)
			}
			t.Stop()
		}
	}
	r.mu.Lock()
	r.untrack(e)
	if f != nil {
		r.recording[f] = e // renewed until recorded (see finish)
	}
	next, unchain := r.follow(e, f != nil)
	handoff := f != nil && next == nil && r.handoff()
	if next == nil && !handoff {
		r.addFree(1)
		r.give(e.queue, 1)
	}
	r.mu.Unlock()

	if f != nil {
		f.Unchain = unchain
		r.finishes <- &finishItem{queue: e.queue, f: f, slot: handoff, chained: next}
	}
	return next
}

// follow starts the job chained behind e, which has returned (ok: with an
// outcome to record, its lease not lost), on e's worker, under e's lease:
// its execution, or nil if none is chained. Once Stop has begun (even
// while it still sees a fetch in flight through, before it waits for the
// executions), it reports instead that e's outcome must unchain the job
// (JobFinish.Unchain), which goes back to the head of its key's parked
// jobs. If e's lease was lost, so was the chained job's: it does not run,
// and the backend puts it back when that lease expires. So too if the
// lease can no longer be trusted (its until has passed while e waited for
// the finish of the job ahead): the chained job would run under a lease
// the backend may be taking back, which puts the job back as not started;
// e's outcome unchains it, should the lease still be held. And if a recall
// of its key came since it was chained (notice.go), heard as e returned.
//
// A client working several queues unchains the job too when no other
// worker is free (but those a fetch in flight asks jobs for): then the
// other queues may be waiting for this one, and the dispatcher's order
// (weights or strict priority) decides what it serves next; the key's job
// goes back to be promoted and fetched like any other. r.mu is held.
func (r *runner) follow(e *execution, ok bool) (*execution, bool) {
	row := e.next
	e.next = nil
	switch {
	case row == nil || !ok || e.lost:
		return nil, false
	case r.fetchCtx.Err() != nil, len(r.cfg.Queues) > 1 && r.free-r.fetching <= 0, !time.Now().Before(e.until),
		r.recalled(e.queue, row, e.nextSent):
		return nil, true
	}
	c := r.track(e.queue, row, e.until)
	c.chainDone = make(chan struct{})
	e.followed = c
	return c, false
}

// addFree counts n more workers free and wakes whoever waits for one. r.mu
// is held.
func (r *runner) addFree(n int) {
	if r.free == 0 && n > 0 {
		r.full, r.fullNow = context.WithCancel(context.Background())
	}
	r.free += n
	close(r.changed)
	r.changed = make(chan struct{})
}

// handoff reports whether a finished job's worker goes to the completer,
// which records the outcome and leases the next jobs for it in one call
// (JobFinish with Fetch), instead of freeing it for the dispatcher's next
// fetch: one round trip per job less, and a promoted job starts without a
// wake-up and a fetch. Only when the client works one queue: with several,
// the dispatcher's weighted or strict order decides which queue a free
// worker serves, and a finish may only lease from its own queue.
func (r *runner) handoff() bool {
	return len(r.cfg.Queues) == 1 && r.fetchCtx.Err() == nil
}

// chain reports whether a fetch or finish of queue asks for chained jobs
// (batondriver.JobFetchParams.Chain): a job chained behind a running one
// starts on its worker as soon as it returns. Not once Stop has begun, nor
// with Config.DisableChaining, nor while the client does not hear the
// queue's recalls (notice.go). A client working one queue always asks; one
// working several asks only if free, the workers that will be free when
// the call has leased, is positive: a chained job then runs only while
// another worker is free for the other queues (follow), and in a pool
// with none it would go back unrun, its chaining and unchaining wasted.
func (r *runner) chain(queue string, free int) bool {
	if r.cfg.DisableChaining || r.fetchCtx.Err() != nil {
		return false
	}
	r.mu.Lock()
	listening := r.listening[queue]
	r.mu.Unlock()
	return listening && (len(r.cfg.Queues) == 1 || free > 0)
}

// releaseSlots frees n workers handed to the completer for queue and not
// used.
func (r *runner) releaseSlots(queue string, n int) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	r.addFree(n)
	r.give(queue, n)
	r.mu.Unlock()
}

// warnUnworkedKinds logs each kind with a worker whose default queue is
// not one of Config.Queues: this client runs none of its jobs there, which
// is rarely what the registration meant.
func (c *Client) warnUnworkedKinds() {
	worked := map[string]bool{}
	for _, q := range c.cfg.Queues {
		worked[q.Name] = true
	}
	for _, kind := range slices.Sorted(maps.Keys(c.cfg.Workers.kinds)) {
		q := cmp.Or(c.cfg.Workers.kinds[kind].opts.Queue, defaultQueue)
		if !worked[q] {
			c.cfg.Logger.Warn("baton: Start: the kind's queue is not in Config.Queues; this client runs none of its jobs there",
				"kind", kind, "queue", q)
		}
	}
}

// maxFinishing is how many batches of outcomes may be in flight at once,
// each one JobFinish call per queue (a call that failed retries outside
// this bound). A finish also leases the next jobs for the workers it frees
// (handoff), so the completer is the pool's fetcher too: one call at a time
// would make its round trip the pool's ceiling.
const maxFinishing = 4

// complete records outcomes in batches, up to maxFinishing at once: when a
// slot is free, whatever has arrived goes in the next batch, one call per
// queue, the queues' calls side by side.
func (r *runner) complete() {
	defer close(r.finished)
	var calls sync.WaitGroup
	defer calls.Wait()
	free := make(chan struct{}, maxFinishing)
	for {
		free <- struct{}{} // a call slot, before taking work: batches grow while all are busy
		first, ok := <-r.finishes
		if !ok {
			return
		}
		batch := map[string][]*batondriver.JobFinish{}
		slots := map[string]int{}
		chained := map[string][]*execution{}
		add := func(it *finishItem) {
			batch[it.queue] = append(batch[it.queue], it.f)
			if it.slot {
				slots[it.queue]++
			}
			if it.chained != nil && it.chained.chainDone != nil {
				chained[it.queue] = append(chained[it.queue], it.chained)
			}
		}
		add(first)
	drain:
		for n := 1; n < 500; n++ {
			select {
			case it, ok := <-r.finishes:
				if !ok {
					break drain
				}
				add(it)
			default:
				break drain
			}
		}
		// One call per queue, side by side, and the batch's slot free once
		// each has been tried: a queue whose calls fail and retry (its
		// Redis Cluster node down) holds up no other queue's outcomes, nor
		// the chained jobs waiting for them.
		var tried sync.WaitGroup
		for queue, fs := range batch {
			tried.Add(1)
			calls.Go(func() { r.finish(queue, fs, slots[queue], chained[queue], tried.Done) })
		}
		go func() {
			tried.Wait()
			<-free
		}()
	}
}

// finish records one queue's outcomes, retrying while the backend is
// unreachable, until Stop's context (if stopping) ends.
//
// slots workers were handed over with the outcomes: the call leases up to
// that many jobs for them (unless the client is stopping) and starts them;
// the workers left over are freed. chained are the executions of the jobs
// chained behind some of these, started already: the call may chain jobs
// behind them in turn, and closes their chainDone once it has returned.
// tried, if not nil, is called once the first try has returned, whatever
// its result.
func (r *runner) finish(queue string, fs []*batondriver.JobFinish, slots int, chained []*execution, tried func()) {
	defer func() {
		for _, c := range chained {
			close(c.chainDone)
		}
	}()
	defer r.recorded(fs)
	// The call chains behind the jobs it leases and behind the chained ones
	// that take over slots here (chained), if chaining is on. The chained
	// executions wait for it only if it may chain behind them; else, and
	// once a failed try has let them go (below), no try chains: they may
	// have returned before it lands, and what it chained behind them would
	// be given back.
	chain := (slots > 0 || len(chained) > 0) && r.chain(queue, r.spareWorkers())
	letGo := func() {
		for _, c := range chained {
			close(c.chainDone)
		}
		chained, chain = nil, false
	}
	if !chain {
		letGo()
	}
	backoff := 10 * time.Millisecond
	for try := 0; ; try++ {
		p := &batondriver.JobFinishParams{Queue: queue, Finished: fs, Retention: r.cfg.CompletedRetention, Chain: chain}
		if slots > 0 && r.fetchCtx.Err() == nil {
			p.Fetch = &batondriver.JobFinishFetch{Max: slots, LeaseTTL: r.cfg.LeaseTTL}
		}
		// The outcomes must be recorded however long it takes, but a call
		// that leases waits only leaseWait, as a fetch does (a later reply
		// would bring leases over by the worker's reckoning): its retry
		// records them without fetching, the workers back with the
		// dispatcher. A call that only records outcomes waits at most
		// LeaseTTL: its retry finds its outcomes recorded, or records them
		// (the heartbeat renews their leases meanwhile), or finds them
		// stale if the leases could not be renewed either. So a stalled
		// server holds up neither the completer's call slots nor Stop for
		// longer.
		wait := r.cfg.LeaseTTL
		if p.Fetch != nil || p.Chain {
			wait = r.leaseWait()
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		sent := time.Now()
		res, err := r.c.driver.JobFinish(ctx, p)
		cancel()
		if tried != nil {
			tried()
			tried = nil
		}
		if err == nil {
			started, back := r.launch(queue, res.Jobs, sent, true)
			r.releaseSlots(queue, slots-started)
			if len(back) > 0 {
				// Leased as Stop began, or chained behind a job that is
				// gone: back to the queue, the attempt not counted, as
				// Stop does with cut-off jobs.
				r.finish(queue, back, 0, nil, nil)
			}
			r.noteDue(fs)
			switch {
			case len(res.Stale) > 0 && try > 0:
				r.log.Info("baton: outcomes retried after a failed call were recorded already, or their leases lost",
					"queue", queue, "jobs", res.Stale)
			case len(res.Stale) > 0:
				r.log.Warn("baton: outcomes of jobs whose leases had been lost were ignored", "queue", queue, "jobs", res.Stale)
			}
			return
		}
		// The workers wait for no retry: the dispatcher may use them; nor
		// do the chained jobs' workers.
		r.releaseSlots(queue, slots)
		slots = 0
		letGo()
		if errors.Is(err, batondriver.ErrBadParams) {
			// Refused, not lost: a retry would be refused too, and the
			// heartbeat would keep the jobs running (and their key slots
			// held) for ever. Their leases lapse instead, and they run
			// again.
			r.log.Error("baton: the backend refused job outcomes; the jobs run again when their leases expire",
				"queue", queue, "jobs", len(fs), "err", err)
			return
		}
		r.log.Warn("baton: recording job outcomes failed; retrying", "queue", queue, "jobs", len(fs), "err", err)
		select {
		case <-time.After(backoff):
		case <-r.giveUp.Done():
			r.abandoned.Store(true)
			r.log.Error("baton: stopped before job outcomes could be recorded; the jobs run again when their leases expire", "queue", queue, "jobs", len(fs))
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// recorded stops the heartbeat renewing the leases of outcomes fs, which
// are recorded, or given up.
func (r *runner) recorded(fs []*batondriver.JobFinish) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range fs {
		delete(r.recording, f)
	}
}

// noteDue tells the dispatcher when the retries and snoozes just recorded
// come due, so that it fetches them on time; other processes learn of them
// from their own fetches.
func (r *runner) noteDue(fs []*batondriver.JobFinish) {
	var due time.Time
	now := time.Now()
	for _, f := range fs {
		at := f.RunAt
		if f.Delay > 0 {
			at = now.Add(f.Delay) // the backend counted from about now
		}
		if !at.IsZero() && (due.IsZero() || at.Before(due)) {
			due = at
		}
	}
	if due.IsZero() {
		return
	}
	r.mu.Lock()
	if r.dueAt.IsZero() || due.Before(r.dueAt) {
		r.dueAt = due
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// heartbeat renews the leases of running jobs every HeartbeatInterval, and
// those of the jobs whose outcomes are not recorded yet (recording): one
// call per queue for all of them, the queues' calls side by side. Jobs the
// backend reports lost are cancelled, and so are those an admin cancelled
// (the cause ErrJobCancelled); if renewals fail, each job's own
// timer cancels it when its lease can no longer be trusted. Stop waits
// for the calls out.
func (r *runner) heartbeat() {
	defer close(r.hbDone)
	var calls sync.WaitGroup
	defer calls.Wait()
	var inFlight sync.Map // queues whose call is out
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.hbStop:
			return
		}
		byQueue := map[string][]*execution{}
		now := time.Now()
		r.mu.Lock()
		for _, e := range r.running {
			if !e.returned && !e.giveUp.IsZero() && now.After(e.giveUp) {
				if e.ctx.Err() == nil || !errors.Is(context.Cause(e.ctx), ErrLeaseLost) {
					r.log.Error("baton: job overran its timeout and ignores its context; its lease is no longer renewed",
						"job_id", e.row.ID, "kind", e.row.Kind, "queue", e.queue)
					e.cancel(ErrLeaseLost)
				}
				continue
			}
			byQueue[e.queue] = append(byQueue[e.queue], e)
		}
		// An outcome's lease is renewed until it is recorded; one that the
		// backend reports lost was recorded as the renewal went out, or
		// will be found stale by its finish, which logs it. Not if the job
		// runs again here (its lease lapsed, the backend leased it anew):
		// that outcome is stale, and a loss reported by job ID would
		// cancel the new execution.
		for _, e := range r.recording {
			if _, again := r.running[execKey{e.queue, e.row.ID}]; !again {
				byQueue[e.queue] = append(byQueue[e.queue], e)
			}
		}
		r.mu.Unlock()
		// Each queue's call on its own: one may take up to LeaseTTL/3, and
		// queues on unreachable nodes (a Cluster) must make neither the
		// other queues' renewals late nor the next round. A queue whose
		// call is still out sits the round out; that call renews its
		// leases if it succeeds.
		for queue, es := range byQueue {
			if _, out := inFlight.LoadOrStore(queue, true); out {
				continue
			}
			calls.Go(func() {
				defer inFlight.Delete(queue)
				r.extend(queue, es)
			})
		}
	}
}

func (r *runner) extend(queue string, es []*execution) {
	leases := make([]batondriver.JobLease, len(es))
	for i, e := range es {
		leases[i] = batondriver.JobLease{ID: e.row.ID, Lease: e.row.Lease}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.LeaseTTL/3)
	defer cancel()
	sent := time.Now()
	res, err := r.c.driver.JobExtend(ctx, &batondriver.JobExtendParams{Queue: queue, Leases: leases, TTL: r.cfg.LeaseTTL})
	if err != nil {
		r.log.Warn("baton: renewing job leases failed", "queue", queue, "jobs", len(es), "err", err)
		return
	}
	lost := make(map[string]bool, len(res.Lost))
	for _, id := range res.Lost {
		lost[id] = true
	}
	cancelled := make(map[string]bool, len(res.CancelRequested))
	for _, id := range res.CancelRequested {
		cancelled[id] = true
	}
	until := sent.Add(r.cfg.LeaseTTL - leaseMargin(r.cfg.LeaseTTL))
	// A job chained behind one reported lost, started since this call's
	// leases were gathered (follow), runs under the lease reported lost,
	// or under its own if the outcome of the job ahead was recorded before
	// this renewal, which is then reported lost for that reason: asked at
	// once, the backend tells which, rather than the next heartbeat.
	var ask []*execution
	inCall := make(map[*execution]bool, len(es))
	for _, e := range es {
		inCall[e] = true
	}
	r.mu.Lock()
	for _, e := range es {
		switch {
		case lost[e.row.ID]:
			e.lost = true
			e.cancel(ErrLeaseLost)
			if c := e.followed; c != nil && !inCall[c] && !c.lost {
				ask = append(ask, c)
			}
		case e.returned:
			// Waiting for the outcome of the job ahead (executeOne): the
			// job chained behind it next starts under this lease.
			e.until = until
		case e.ctx.Err() == nil:
			e.until = until
			e.expiry.Reset(time.Until(until))
		}
		if cancelled[e.row.ID] {
			// An admin cancelled the job (Client.JobCancel): its handler
			// stops. The backend renews its lease until the outcome is
			// recorded, as for every job still in running or recording.
			e.cancel(ErrJobCancelled)
		}
	}
	r.mu.Unlock()
	if len(ask) > 0 {
		r.extend(queue, ask)
	}
}

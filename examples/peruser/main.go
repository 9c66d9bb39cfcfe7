// Peruser mirrors seeds S1–S3 (locked-job-per-id): a job that works through
// one user's event stream, locked around the user ID, fanned out to every
// user on a recurring schedule.
//
//   - S1: the sync job has ConcurrencyOpts{Limit: 1, OnBusy: OnBusyDrop}
//     keyed by user: while user 1 is syncing, another sync of user 1 is
//     dropped at once, and user 2 syncs beside it. Limit is the number of
//     holders per key. The lock's safety expiry is the job's lease
//     (Config.LeaseTTL): if the worker process dies, the lock expires on its
//     own. A hung handler has its context cancelled at the kind's Timeout;
//     if it ignores that for longer than LeaseTTL, the heartbeat stops
//     renewing its lease, and the lock expires all the same.
//   - S2: a sync takes a few events per run and, if events are left,
//     returns baton.JobAgain(): its next run is queued in the same atomic
//     step that frees the lock, so no twin slips in between and the
//     follow-up is never lost.
//   - S3: a PeriodicJob fans out one sync per user. Two clients run the
//     schedule, as two processes would; each tick is inserted once.
//
// The seed ticks every 15 minutes; --every defaults to 1s so that a few
// ticks pass in seconds. New events arrive at each of the first --ticks
// ticks. The program ends when every event was processed, and exits 1 if a
// guarantee did not hold. It runs in memory, or on Redis with --redis URL:
//
//	go run ./examples/peruser [--every 1s] [--ticks 3] [--redis redis://127.0.0.1:6379/0]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/examples/internal/exampleenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout))
}

// SyncUser processes the pending events of one user.
type SyncUser struct {
	UserID int `json:"user_id"`
}

func (SyncUser) Kind() string { return "sync_user" }

// FanOut inserts a SyncUser for every user: the seed's MySchedulerWorker.
type FanOut struct {
	Tick time.Time `json:"tick"`
}

func (FanOut) Kind() string { return "fan_out" }

const (
	batch    = 3                     // events per sync run
	perEvent = 40 * time.Millisecond // the rate-limited API call per event
)

var users = []int{1, 2, 3}

// run plays the scenario and returns the exit code: 0 if every guarantee
// held, 1 if one failed or the backend could not be used, 2 for bad flags.
func run(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("peruser", flag.ContinueOnError)
	fs.SetOutput(out)
	every := fs.Duration("every", time.Second, "fan-out period (the seed's is 15m)")
	ticks := fs.Int("ticks", 3, "ticks that bring new events")
	redisURL := fs.String("redis", "", "Redis URL (redis://host:port/db); default: the in-memory backend")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	schedule, err := baton.Every(*every)
	if err != nil || *ticks < 1 {
		fmt.Fprintf(out, "peruser: --every %v must be at least 10ms and --ticks %d at least 1\n", *every, *ticks)
		return 2
	}
	driver, closeDriver, err := exampleenv.Open(*redisURL, fmt.Sprintf("example-peruser-%d", time.Now().UnixNano()))
	if err != nil {
		fmt.Fprintln(out, "peruser:", err)
		return 1
	}
	defer closeDriver()

	p := &program{out: out, ticks: *ticks, events: newStreams(), running: map[int]int{}, most: map[int]int{}, last: map[int]syncRun{}, fanOuts: map[int64]int{}}
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[SyncUser](p.sync), &baton.WorkerOpts{
		Concurrency: &baton.ConcurrencyOpts{
			Key:    baton.KeyOf(func(a SyncUser) string { return fmt.Sprintf("user:%d", a.UserID) }),
			Limit:  1,
			OnBusy: baton.OnBusyDrop,
		},
	})
	baton.AddWorker(workers, baton.WorkFunc[FanOut](p.fanOut), nil)

	// Two clients run the schedule, as two processes would.
	var clients []*baton.Client
	for range 2 {
		c, err := baton.NewClient(driver, &baton.Config{
			Workers:     workers,
			Concurrency: 10,
			LeaseTTL:    10 * time.Second, // the lock's safety expiry if a worker process dies
			PeriodicJobs: []*baton.PeriodicJob{{
				Name:     "sync-all-users",
				Schedule: schedule,
				Job: func(tick time.Time) (baton.JobArgs, *baton.InsertOpts) {
					p.mu.Lock()
					p.fired++ // by either client
					p.mu.Unlock()
					return FanOut{Tick: tick}, nil
				},
			}},
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			fmt.Fprintln(out, "peruser:", err)
			return 1
		}
		clients = append(clients, c)
	}
	p.client = clients[0]

	fmt.Fprintf(out, "Per-user sync on %s; fan-out every %v (the seed's: 15m), 2 clients.\n\n", exampleenv.Backend(*redisURL), *every)
	p.events.add(1, 18) // user 1 has a backlog
	p.events.add(2, 6)

	fmt.Fprintln(out, "The seed's example, before any worker runs:")
	for _, user := range []int{1, 2, 1} {
		res, err := p.client.Insert(ctx, SyncUser{UserID: user}, nil)
		if err != nil {
			fmt.Fprintln(out, "peruser:", err)
			return 1
		}
		why := "will process"
		if res.Job.State == baton.JobStateDropped {
			p.dropped++
			why = fmt.Sprintf("exits at once: user %d holds the lock", user)
		}
		fmt.Fprintf(out, "  sync user %d → %s (%s)\n", user, res.Job.State, why)
	}
	fmt.Fprintln(out)

	for _, c := range clients {
		if err := c.Start(ctx); err != nil {
			fmt.Fprintln(out, "peruser:", err)
			return 1
		}
		defer stop(ctx, c) // on an early return; stopping again does nothing
	}
	deadline := time.Duration(*ticks+3)**every + 10*time.Second
	finished := waitUntil(ctx, deadline, p.finished)
	for _, c := range clients {
		stop(ctx, c)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintln(out, "\nChecks:")
	c := &exampleenv.Checks{Out: out}
	c.Check(finished, fmt.Sprintf("every event was processed within %v", deadline))
	for _, user := range users {
		c.Check(p.most[user] <= 1, fmt.Sprintf("user %d: at most one sync at once (seen %d)", user, p.most[user]))
	}
	c.Check(p.mostUsers >= 2, fmt.Sprintf("different users synced in parallel (up to %d at once)", p.mostUsers))
	c.Check(p.dropped >= 1, fmt.Sprintf("twins of a running sync were dropped (%d)", p.dropped))
	processed, added, twice := p.events.totals()
	c.Check(processed == added && twice == 0, fmt.Sprintf("each of the %d events processed exactly once (%d processed, %d twice)", added, processed, twice))
	p.owedLocked()
	c.Check(p.again >= 1 && len(p.broken) == 0,
		fmt.Sprintf("each of the %d JobAgain follow-ups was its user's next sync: none lost, no twin in between%s", p.again, listed(p.broken)))
	once := true
	for _, n := range p.fanOuts {
		once = once && n == 1
	}
	c.Check(once && len(p.fanOuts) >= p.ticks, fmt.Sprintf("each of %d ticks fanned out once (the 2 clients fired %d times)", len(p.fanOuts), p.fired))
	return c.Result()
}

// program is the scenario's state: what the workers did, for the checks.
type program struct {
	out    io.Writer
	ticks  int
	client *baton.Client
	events *streams

	mu        sync.Mutex
	running   map[int]int     // syncs running per user
	most      map[int]int     // most syncs of a user at once
	mostUsers int             // most users syncing at once
	dropped   int             // syncs dropped as twins
	again     int             // runs that returned JobAgain
	last      map[int]syncRun // each user's latest run
	broken    []string        // follow-ups lost, or runs that slipped in before one
	fired     int             // ticks fired by the clients
	fanOuts   map[int64]int   // fan-outs run per tick (Unix ms)
}

// sync is the seed's MyWorker: process a few events; if some are left,
// run again.
func (p *program) sync(ctx context.Context, job *baton.Job[SyncUser]) error {
	user := job.Args.UserID
	p.enter(user, job)
	defer p.leave(user)
	done := 0
	for ; done < batch; done++ {
		event, ok := p.events.next(user)
		if !ok {
			break
		}
		select {
		case <-time.After(perEvent): // call the API
		case <-ctx.Done():
			return ctx.Err() // the event stays pending
		}
		p.events.done(user, event)
	}
	left := p.events.left(user)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[user] = syncRun{id: job.ID, runs: job.Runs, again: left > 0}
	if left > 0 {
		p.again++
		fmt.Fprintf(p.out, "  user %d job %s run %d: processed %d, %d left → JobAgain\n", user, short(job.ID), job.Runs+1, done, left)
		return baton.JobAgain()
	}
	fmt.Fprintf(p.out, "  user %d job %s run %d: processed %d, none left → done\n", user, short(job.ID), job.Runs+1, done)
	return nil
}

// fanOut is the seed's MySchedulerWorker: new events arrive between ticks
// (for the first ticks), then every user gets a sync.
func (p *program) fanOut(ctx context.Context, job *baton.Job[FanOut]) error {
	p.mu.Lock()
	p.fanOuts[job.Args.Tick.UnixMilli()]++
	n := len(p.fanOuts)
	p.mu.Unlock()
	if n <= p.ticks {
		for _, user := range users {
			p.events.add(user, 2)
		}
	}
	var jobs []*baton.InsertManyParams
	for _, user := range users {
		jobs = append(jobs, &baton.InsertManyParams{Args: SyncUser{UserID: user}})
	}
	res, err := p.client.InsertMany(ctx, jobs)
	if err != nil {
		return err
	}
	var what []string
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range res {
		state := string(r.Job.State)
		if r.Job.State == baton.JobStateDropped {
			p.dropped++
			state = "dropped (busy)"
		}
		what = append(what, fmt.Sprintf("user %d %s", users[i], state))
	}
	fmt.Fprintf(p.out, "tick %d at %s: %s\n", n, job.Args.Tick.Format("15:04:05.000"), strings.Join(what, ", "))
	return nil
}

// syncRun is a run of a sync job: its ID, its number (Job.Runs) and
// whether it returned JobAgain.
type syncRun struct {
	id    string
	runs  int
	again bool
}

func (p *program) enter(user int, job *baton.Job[SyncUser]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	// After a run that returned JobAgain, the user's next run must be that
	// job's next run: the follow-up kept the lock, so nothing slipped in.
	if last := p.last[user]; last.again && (job.ID != last.id || job.Runs != last.runs+1) {
		p.broken = append(p.broken, fmt.Sprintf("user %d: job %s run %d came after job %s run %d asked to run again",
			user, short(job.ID), job.Runs+1, short(last.id), last.runs+1))
	}
	p.last[user] = syncRun{id: job.ID, runs: job.Runs}
	p.running[user]++
	p.most[user] = max(p.most[user], p.running[user])
	p.mostUsers = max(p.mostUsers, p.busyUsersLocked())
}

func (p *program) leave(user int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.running[user]--
}

// finished reports that the ticks that bring events have fanned out and
// every event was processed.
func (p *program) finished() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.fanOuts) >= p.ticks && p.events.pending() == 0 && p.busyUsersLocked() == 0
}

// owedLocked adds to broken the users whose latest run asked to run
// again and whose follow-up never ran: lost.
func (p *program) owedLocked() {
	for _, user := range users {
		if last := p.last[user]; last.again {
			p.broken = append(p.broken, fmt.Sprintf("user %d: the follow-up of job %s run %d never ran", user, short(last.id), last.runs+1))
		}
	}
}

func (p *program) busyUsersLocked() int {
	n := 0
	for _, r := range p.running {
		if r > 0 {
			n++
		}
	}
	return n
}

// listed is ": a; b" for a non-empty list (its first 3, then how many
// more), else "".
func listed(s []string) string {
	switch {
	case len(s) == 0:
		return ""
	case len(s) > 3:
		return fmt.Sprintf(": %s; and %d more", strings.Join(s[:3], "; "), len(s)-3)
	}
	return ": " + strings.Join(s, "; ")
}

// short abbreviates a job ID for printing.
func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// stop stops c, letting its running jobs finish.
func stop(ctx context.Context, c *baton.Client) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.Stop(ctx)
}

// waitUntil reports whether done became true within timeout.
func waitUntil(ctx context.Context, timeout time.Duration, done func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if done() {
			return true
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return false
		}
	}
}

// streams are the users' event streams: the external system the syncs
// work through. An event processed twice — two syncs of one user at once —
// is counted, not hidden.
type streams struct {
	mu        sync.Mutex
	seq       int
	pendingOf map[int][]int // user → events not yet processed, oldest first
	added     int
	processed int
	twice     int
}

func newStreams() *streams { return &streams{pendingOf: map[int][]int{}} }

func (s *streams) add(user, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.seq++
		s.pendingOf[user] = append(s.pendingOf[user], s.seq)
	}
	s.added += n
}

// next returns the user's oldest pending event.
func (s *streams) next(user int) (int, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pendingOf[user]) == 0 {
		return 0, false
	}
	return s.pendingOf[user][0], true
}

// done marks event processed; if it is no longer pending, another sync
// processed it too.
func (s *streams) done(user, event int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.pendingOf[user], event)
	if i < 0 {
		s.twice++
		return
	}
	s.pendingOf[user] = slices.Delete(s.pendingOf[user], i, i+1)
	s.processed++
}

func (s *streams) left(user int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pendingOf[user])
}

func (s *streams) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.added - s.processed
}

func (s *streams) totals() (processed, added, twice int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.processed, s.added, s.twice
}

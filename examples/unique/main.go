// Unique mirrors seeds S4–S6 (resque-locket): jobs whose lock key comes
// from their payload, kept alive by a heartbeat while they run, and not lost
// when the worker running them is killed.
//
//   - S4: the keys come from the job. An export is unique by its whole
//     payload (UniqueOpts' default key: the kind and the canonical JSON
//     args). A rebuild picks the field that matters with KeyOf — the index,
//     not who asked or when, as the seed's job_lock_key leaves out a
//     timestamp.
//   - S5: LeaseTTL is 600ms here. A rebuild that runs 3s, five TTLs,
//     keeps its lease and its lock through the heartbeat, which renews them
//     every TTL/3. When the worker process is killed with SIGKILL, nothing
//     renews the lease and it expires on its own.
//   - S6: a rebuild of an index that is being rebuilt cannot get its lock
//     (ConcurrencyOpts, limit 1 per index): it waits parked, neither dropped
//     nor lost. The killed worker's job comes back when its lease expires,
//     runs again in the other process and completes.
//
// The worker that is killed is this program started again as a second OS
// process (environment BATON_CHILD=unique-worker); both processes share one
// Redis, which the program needs and does not start:
//
//	go run ./examples/unique --redis redis://127.0.0.1:6379/0
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"sync"
	"time"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/examples/internal/exampleenv"
)

// How the program starts its worker process: as itself, with these
// environment variables.
const (
	workerRole = "unique-worker"
	envRole    = "BATON_CHILD"
	envRedis   = "BATON_UNIQUE_REDIS"
	envPrefix  = "BATON_UNIQUE_PREFIX"
)

func main() {
	if os.Getenv(envRole) == workerRole {
		os.Exit(worker())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout))
}

// Export exports an account's data in a format.
type Export struct {
	Account int    `json:"account"`
	Format  string `json:"format"`
}

func (Export) Kind() string { return "export" }

// Rebuild rebuilds a search index; it takes Work.
type Rebuild struct {
	Index       string        `json:"index"`
	RequestedBy string        `json:"requested_by"`
	RequestedAt time.Time     `json:"requested_at"`
	Work        time.Duration `json:"work"`
}

func (Rebuild) Kind() string { return "rebuild" }

// leaseTTL is how long a job's lease, and so its lock, lasts without a
// heartbeat: the seed's job_lock_duration. Heartbeats renew it every
// leaseTTL/3, the seed's heartbeat_frequency.
const leaseTTL = 600 * time.Millisecond // tolerates a 400ms stall of a loaded machine

// event is what a worker reports of a job: "start" or "done".
type event struct {
	what    string
	id      string
	attempt int
	fence   int64
	pid     int
	at      time.Time
}

// newClient returns a client of both kinds on driver, whose workers report
// to report.
func newClient(driver batondriver.JobDriver, report func(event)) (*baton.Client, error) {
	byIndex := baton.KeyOf(func(r Rebuild) string { return "index:" + r.Index })
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[Export](func(ctx context.Context, job *baton.Job[Export]) error {
		report(event{what: "start", id: job.ID, attempt: job.Attempt})
		report(event{what: "done", id: job.ID, attempt: job.Attempt})
		return nil
	}), &baton.WorkerOpts{Unique: &baton.UniqueOpts{}}) // key: kind + whole payload
	baton.AddWorker(workers, baton.WorkFunc[Rebuild](func(ctx context.Context, job *baton.Job[Rebuild]) error {
		report(event{what: "start", id: job.ID, attempt: job.Attempt, fence: job.Fence})
		select {
		case <-time.After(job.Args.Work):
		case <-ctx.Done():
			return ctx.Err()
		}
		report(event{what: "done", id: job.ID, attempt: job.Attempt, fence: job.Fence})
		return nil
	}), &baton.WorkerOpts{
		// One rebuild per index at a time; a twin waits its turn.
		Concurrency: &baton.ConcurrencyOpts{Key: byIndex, Limit: 1},
		// At most one rebuild per index waiting besides the running one.
		Unique: &baton.UniqueOpts{Key: byIndex, Scope: baton.UniqueQueued},
	})
	return baton.NewClient(driver, &baton.Config{
		Workers: workers, Concurrency: 4, LeaseTTL: leaseTTL,
		PollInterval: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
}

// worker is the worker process: it runs jobs and reports them on stdout
// until it is killed or its stdin closes (the parent is gone).
func worker() int {
	driver, closeDriver, err := exampleenv.Open(os.Getenv(envRedis), os.Getenv(envPrefix))
	if err != nil {
		fmt.Fprintln(os.Stderr, "unique worker:", err)
		return 1
	}
	defer closeDriver()
	// The first line out is "ready": a job may start as soon as the client
	// does, and its events wait for that line.
	var ready sync.Mutex
	ready.Lock()
	client, err := newClient(driver, func(e event) {
		ready.Lock()
		defer ready.Unlock()
		fmt.Printf("%s %s %d %d\n", e.what, e.id, e.attempt, e.fence) // one write per line
	})
	if err == nil {
		err = client.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "unique worker:", err)
		return 1
	}
	fmt.Println("ready")
	ready.Unlock()
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = client.Stop(ctx)
	return 0
}

// run plays the scenario and returns the exit code: 0 if every guarantee
// held, 1 if one failed or Redis could not be used, 2 for bad flags or no
// Redis.
func run(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("unique", flag.ContinueOnError)
	fs.SetOutput(out)
	redisURL := fs.String("redis", "", "Redis URL (redis://host:port/db), required: two processes share it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *redisURL == "" {
		fmt.Fprintln(out, `unique: this example runs two OS processes that share one Redis, and needs its URL:
  go run ./examples/unique --redis redis://127.0.0.1:6379/0
A throwaway server: redis-server --port 6390 --save "" --appendonly no`)
		return 2
	}
	prefix := fmt.Sprintf("example-unique-%d", time.Now().UnixNano())
	driver, closeDriver, err := exampleenv.Open(*redisURL, prefix)
	if err != nil {
		fmt.Fprintln(out, "unique:", err)
		return 1
	}
	defer closeDriver()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	s := &scenario{ctx: ctx, out: out, events: make(chan event, 100), labels: map[string]string{}, Checks: exampleenv.Checks{Out: out}}
	// This process's client inserts now and works only after the kill.
	s.client, err = newClient(driver, func(e event) {
		e.pid, e.at = os.Getpid(), time.Now()
		s.events <- e
	})
	if err != nil {
		fmt.Fprintln(out, "unique:", err)
		return 1
	}

	fmt.Fprintln(out, "S4: keys from the payload (no worker runs yet).")
	csv := s.insert("export 7 csv", Export{Account: 7, Format: "csv"})
	csvTwin := s.insert("export 7 csv, again", Export{Account: 7, Format: "csv"})
	pdf := s.insert("export 7 pdf", Export{Account: 7, Format: "pdf"})
	s.Check(csvTwin.Status == baton.JobDuplicate && csvTwin.Job.ID == csv.Job.ID, "an identical export resolves to the first: same kind and payload")
	s.Check(pdf.Status == baton.JobInserted && pdf.Job.ID != csv.Job.ID, "an export with another format is another job")

	w, err := startWorker(*redisURL, prefix, s.events)
	if err != nil {
		fmt.Fprintln(out, "unique:", err)
		return 1
	}
	defer w.stop()
	fmt.Fprintf(out, "\nStarted worker process %d.\n", w.cmd.Process.Pid)
	s.await("done", csv.Job.ID, nil)
	s.await("done", pdf.Job.ID, nil)

	fmt.Fprintf(out, "\nS5: a rebuild runs 3s, five times the %v lease, kept by the heartbeat.\n", leaseTTL)
	products := s.insert("rebuild products", Rebuild{Index: "products", RequestedBy: "cron", RequestedAt: time.Now(), Work: 3 * time.Second})
	leases := map[time.Time]bool{}
	s.await("done", products.Job.ID, func() {
		if row, err := s.client.JobGet(ctx, "default", products.Job.ID); err == nil && row.State == baton.JobStateRunning {
			leases[row.LeaseUntil] = true
		}
	})
	row := s.whenRecorded([]string{products.Job.ID})[products.Job.ID]
	fmt.Fprintf(out, "  lease seen extended %d times while it ran\n", len(leases)-1)
	s.Check(row.State == baton.JobStateCompleted && row.Attempt == 1 && len(leases) >= 3, "it completed in its first attempt, its lease renewed as it ran")

	fmt.Fprintln(out, "\nS5, S6: a worker killed mid-job; a twin that cannot get the lock.")
	orders := s.insert("rebuild orders by cron", Rebuild{Index: "orders", RequestedBy: "cron", RequestedAt: time.Now(), Work: time.Second})
	s.await("start", orders.Job.ID, nil)
	alice := s.insert("rebuild orders by alice", Rebuild{Index: "orders", RequestedBy: "alice", RequestedAt: time.Now(), Work: time.Second})
	bob := s.insert("rebuild orders by bob", Rebuild{Index: "orders", RequestedBy: "bob", RequestedAt: time.Now(), Work: time.Second})
	s.Check(alice.Job.State == baton.JobStateParked, "alice's rebuild cannot get the lock while cron's runs: it waits parked")
	s.Check(bob.Status == baton.JobDuplicate && bob.Job.ID == alice.Job.ID, "bob's resolves to alice's: the key is the index alone, not who asked or when")
	if info, err := s.client.KeyGet(ctx, "default", "index:orders"); err == nil {
		fmt.Fprintf(out, "  lock index:orders: %d running, %d parked\n", info.Running, info.Parked)
	}

	killedAt := w.kill() // SIGKILL: no cleanup, no release
	fmt.Fprintf(out, "  killed worker process %d with SIGKILL while it ran cron's rebuild\n", w.cmd.Process.Pid)
	fmt.Fprintf(out, "  Redis still has the job %s, holding the lock; nobody renews its lease\n", s.jobGet(orders.Job.ID).State)
	if err := s.client.Start(ctx); err != nil {
		fmt.Fprintln(out, "unique:", err)
		return 1
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.client.Stop(stopCtx)
	}()
	fmt.Fprintf(out, "  this process (%d) works now\n", os.Getpid())
	freed := s.await("start", alice.Job.ID, nil)
	fmt.Fprintf(out, "  the lease expired and the lock passed on %v after the kill; cron's rebuild, taken back, waits its turn\n",
		freed.at.Sub(killedAt).Round(time.Millisecond))
	s.await("done", orders.Job.ID, nil)

	fmt.Fprintln(out, "\nChecks:")
	all := []string{csv.Job.ID, pdf.Job.ID, products.Job.ID, orders.Job.ID, alice.Job.ID}
	rows := s.whenRecorded(all)
	cron := rows[orders.Job.ID]
	lease := ""
	if len(cron.Errors) > 0 {
		lease = cron.Errors[0].Error
	}
	s.Check(cron.State == baton.JobStateCompleted && cron.Attempt == 2, fmt.Sprintf("cron's rebuild ran again after its lease expired and completed (attempt %d; recorded: %q)", cron.Attempt, lease))
	completed := 0
	for _, row := range rows {
		if row.State == baton.JobStateCompleted {
			completed++
		}
	}
	s.Check(completed == len(all), fmt.Sprintf("nothing lost: %d of %d jobs completed", completed, len(all)))
	s.Check(s.oneAtATime(map[string]bool{orders.Job.ID: true, alice.Job.ID: true}, killedAt), "the orders rebuilds never ran at once, and their fences rose")
	return s.Result()
}

// scenario narrates the jobs of both processes and checks them.
type scenario struct {
	ctx     context.Context
	out     io.Writer
	client  *baton.Client
	events  chan event
	labels  map[string]string // job ID → what it is
	history []event
	exampleenv.Checks
}

func (s *scenario) insert(label string, args baton.JobArgs) *baton.InsertResult {
	res, err := s.client.Insert(s.ctx, args, nil)
	if err != nil {
		s.Check(false, fmt.Sprintf("insert %s: %v", label, err))
		return &baton.InsertResult{Job: &baton.JobRow{}}
	}
	if _, ok := s.labels[res.Job.ID]; !ok {
		s.labels[res.Job.ID] = label
	}
	fmt.Fprintf(s.out, "  insert %-24s → %-9s job %s, unique key %s\n", label, res.Status, short(res.Job.ID), res.Job.Unique)
	return res
}

// await prints the workers' events until job id reports what (or returns
// at once if it did already), calling every (if not nil) every 50ms
// meanwhile.
func (s *scenario) await(what, id string, every func()) event {
	for _, e := range s.history {
		if e.what == what && e.id == id {
			return e
		}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case e := <-s.events:
			s.history = append(s.history, e)
			fmt.Fprintf(s.out, "  process %d: %-5s %s (attempt %d)\n", e.pid, e.what, s.labels[e.id], e.attempt)
			if e.what == what && e.id == id {
				return e
			}
		case <-tick.C:
			if every != nil {
				every()
			}
		case <-s.ctx.Done():
			s.Check(false, fmt.Sprintf("%s of %s in time", what, s.labels[id]))
			return event{}
		}
	}
}

func (s *scenario) jobGet(id string) *baton.JobRow {
	row, err := s.client.JobGet(s.ctx, "default", id)
	if err != nil {
		return &baton.JobRow{}
	}
	return row
}

// whenRecorded returns the jobs once none is queued or running any more —
// a worker records an outcome just after its handler returns — or after 5s.
func (s *scenario) whenRecorded(ids []string) map[string]*baton.JobRow {
	deadline := time.Now().Add(5 * time.Second)
	for {
		rows, ended := map[string]*baton.JobRow{}, 0
		for _, id := range ids {
			rows[id] = s.jobGet(id)
			switch rows[id].State {
			case baton.JobStateCompleted, baton.JobStateDead, baton.JobStateCancelled, baton.JobStateDropped:
				ended++
			}
		}
		if ended == len(ids) || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// oneAtATime reports whether the executions of jobs never overlapped, the
// killed one ending at killedAt, and their fences rose.
func (s *scenario) oneAtATime(jobs map[string]bool, killedAt time.Time) bool {
	type span struct {
		start, end time.Time
		fence      int64
	}
	var spans []*span
	open := map[string]*span{}
	for _, e := range s.history {
		switch {
		case !jobs[e.id]:
		case e.what == "start":
			open[e.id] = &span{start: e.at, end: killedAt, fence: e.fence}
			spans = append(spans, open[e.id])
		case e.what == "done":
			open[e.id].end = e.at
		}
	}
	sort.Slice(spans, func(i, k int) bool { return spans[i].start.Before(spans[k].start) })
	for i := 1; i < len(spans); i++ {
		if spans[i].start.Before(spans[i-1].end) || spans[i].fence <= spans[i-1].fence {
			return false
		}
	}
	return len(spans) == 3
}

// workerProc is the worker process.
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	read  chan struct{} // closed when its stdout is read to the end
}

// startWorker starts this program again as a worker on the same Redis and
// prefix, waits until it works, and forwards its events.
func startWorker(redisURL, prefix string, events chan<- event) (*workerProc, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envRole+"="+workerRole, envRedis+"="+redisURL, envPrefix+"="+prefix)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the worker process: %w", err)
	}
	w := &workerProc{cmd: cmd, stdin: stdin, read: make(chan struct{})}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, errors.New("the worker process did not start")
	}
	pid := cmd.Process.Pid
	go func() {
		defer close(w.read)
		for lines.Scan() {
			var e event
			if _, err := fmt.Sscanf(lines.Text(), "%s %s %d %d", &e.what, &e.id, &e.attempt, &e.fence); err == nil {
				e.pid, e.at = pid, time.Now()
				events <- e
			}
		}
	}()
	return w, nil
}

// kill sends SIGKILL to the worker and waits for it to die.
func (w *workerProc) kill() time.Time {
	_ = w.cmd.Process.Kill()
	at := time.Now()
	w.stop()
	return at
}

// stop ends the worker, if it is still running, by closing its stdin, and
// waits for it.
func (w *workerProc) stop() {
	_ = w.stdin.Close()
	select {
	case <-w.read:
	case <-time.After(10 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.read
	}
	_ = w.cmd.Wait()
}

// short abbreviates a job ID for printing.
func short(id string) string {
	if len(id) > 8 {
		return id[len(id)-8:]
	}
	return id
}

// Webhooks mirrors seeds S11–S14 (slot-limits-lockwait): webhook
// deliveries limited to 10 at once per customer, with the limits changed
// from outside while the deliveries run.
//
//   - S11: the webhook kind has ConcurrencyOpts{Limit: 10} keyed by
//     customer: at most 10 deliveries per customer at once, across every
//     process sharing the backend.
//   - S12: deliveries beyond the limit are parked, where no worker sees
//     them; each freed slot promotes the next parked delivery in the same
//     step. Nothing polls or retries.
//   - S13: the on-busy policy is chosen per job: deliveries wait; a ping is
//     dropped if its customer is busy; a digest is rescheduled after a
//     delay the job computes.
//   - S14: the limit lives in the backend and changes at runtime, as an
//     admin UI would change it (Client.SetLimit): acme is lowered to 3,
//     globex raised to 20 — its parked deliveries start at once — and
//     initech set to 0, which halts it; then initech resumes and every
//     limit is reset to the kind's 10.
//
// For each phase it prints the most deliveries seen at once per customer
// beside the limit, and it exits 1 if a limit was ever exceeded, a halted
// customer ran, or a delivery was lost or repeated. It runs in memory, or on
// Redis with --redis URL:
//
//	go run ./examples/webhooks [--redis redis://127.0.0.1:6379/0]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
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

// Webhook is one delivery to a customer's endpoint.
type Webhook struct {
	Customer string `json:"customer"`
	N        int    `json:"n"`
}

func (Webhook) Kind() string { return "webhook" }

const (
	queue       = "webhooks"
	perCustomer = 60
	delivery    = 40 * time.Millisecond // one HTTP call
	// The odd deliveries of acme that show the other on-busy policies.
	ping   = 1000 // dropped if acme is busy
	digest = 1001 // rescheduled while acme is busy
)

var customers = []string{"acme", "globex", "initech"}

// byCustomer limits deliveries to 10 at once per customer, with the
// on-busy policy given.
func byCustomer(onBusy baton.OnBusy) *baton.ConcurrencyOpts {
	return &baton.ConcurrencyOpts{
		Key:       baton.KeyOf(func(w Webhook) string { return "customer:" + w.Customer }),
		Limit:     10,
		OnBusy:    onBusy,
		BusyDelay: func(baton.JobArgs) time.Duration { return 200 * time.Millisecond },
	}
}

// run plays the scenario and returns the exit code: 0 if every guarantee
// held, 1 if one failed or the backend could not be used, 2 for bad flags.
func run(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("webhooks", flag.ContinueOnError)
	fs.SetOutput(out)
	redisURL := fs.String("redis", "", "Redis URL (redis://host:port/db); default: the in-memory backend")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	driver, closeDriver, err := exampleenv.Open(*redisURL, fmt.Sprintf("example-webhooks-%d", time.Now().UnixNano()))
	if err != nil {
		fmt.Fprintln(out, "webhooks:", err)
		return 1
	}
	defer closeDriver()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	t := newTally()
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[Webhook](t.deliver), &baton.WorkerOpts{
		Queue: queue, Concurrency: byCustomer(baton.OnBusyWait),
	})
	client, err := baton.NewClient(driver, &baton.Config{
		Workers: workers, Queues: []baton.QueueConfig{{Name: queue}}, Concurrency: 50,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Fprintln(out, "webhooks:", err)
		return 1
	}
	a := &admin{ctx: ctx, out: out, client: client, tally: t, Checks: exampleenv.Checks{Out: out}}
	fmt.Fprintf(out, "Webhooks on %s: %d per customer, at most 10 at once per customer.\n\n", exampleenv.Backend(*redisURL), perCustomer)

	var jobs []*baton.InsertManyParams
	for n := range perCustomer {
		for _, c := range customers {
			jobs = append(jobs, &baton.InsertManyParams{Args: Webhook{Customer: c, N: n}})
		}
	}
	if _, err := client.InsertMany(ctx, jobs); err != nil {
		fmt.Fprintln(out, "webhooks:", err)
		return 1
	}
	a.printKeys("Inserted; before any worker runs, the keys hold:")
	inserted := map[int]baton.JobState{} // the odd deliveries' states at their inserts
	for _, extra := range []struct {
		n      int
		onBusy baton.OnBusy
	}{{ping, baton.OnBusyDrop}, {digest, baton.OnBusyReschedule}} {
		res, err := client.Insert(ctx, Webhook{Customer: "acme", N: extra.n}, &baton.InsertOpts{Concurrency: byCustomer(extra.onBusy)})
		if err != nil {
			fmt.Fprintln(out, "webhooks:", err)
			return 1
		}
		inserted[extra.n] = res.Job.State
		fmt.Fprintf(out, "  an acme webhook with OnBusy %-10s → %s\n", extra.onBusy, res.Job.State)
	}
	fmt.Fprintln(out)

	a.begin("limit 10, the kind's default")
	if err := client.Start(ctx); err != nil {
		fmt.Fprintln(out, "webhooks:", err)
		return 1
	}
	a.waitUntil(func() bool {
		return t.delivered("acme") >= 10 && t.delivered("globex") >= 10 && t.delivered("initech") >= 10
	})
	a.end()

	a.begin("acme 3, globex 20, initech 0")
	a.setLimit("acme", 3)
	a.setLimit("globex", 20)
	a.setLimit("initech", 0)
	a.settle()
	acme, initech := t.delivered("acme"), t.delivered("initech")
	a.waitUntil(func() bool { return t.delivered("acme") >= acme+9 })
	info := a.keyGet("initech")
	fmt.Fprintf(out, "initech while halted: %d delivered, then %d; %d holding a slot, %d parked\n", initech, t.delivered("initech"), info.Holding, info.Parked)
	a.Check(t.delivered("initech") == initech && info.Holding == 0 && info.Parked > 0, "a limit of 0 halted initech; its deliveries wait parked")
	a.end()

	a.begin("initech resumed, limits reset")
	a.resetLimit("initech")
	a.resetLimit("acme")
	a.resetLimit("globex")
	a.settle()
	a.waitUntil(func() bool { return t.total() == len(jobs)+1 })
	a.end()

	stopCtx, cancelStop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	_ = client.Stop(stopCtx)
	cancelStop()

	fmt.Fprintln(out, "Most deliveries at once / limit, per customer, once each limit took effect:")
	t.printPhases(out)
	fmt.Fprintln(out, "\nChecks:")
	t.check(a, inserted)
	_, active, err := client.KeyList(context.WithoutCancel(ctx), queue, nil)
	a.Check(err == nil && active == 0, "every key went idle: no holder, nothing parked, no override left")
	return a.Result()
}

// admin changes the limits and watches the keys, as an admin UI would,
// and reports the checks.
type admin struct {
	ctx    context.Context
	out    io.Writer
	client *baton.Client
	tally  *tally
	phase  string // the current phase
	exampleenv.Checks
}

func (a *admin) key(customer string) string { return "customer:" + customer }

func (a *admin) keyGet(customer string) *baton.KeyInfo {
	info, err := a.client.KeyGet(a.ctx, queue, a.key(customer))
	if err != nil {
		return &baton.KeyInfo{Limit: -1}
	}
	return info
}

func (a *admin) printKeys(title string) {
	fmt.Fprintln(a.out, title)
	for _, c := range customers {
		info := a.keyGet(c)
		fmt.Fprintf(a.out, "  %-8s limit %2d, %2d holding a slot, %2d chained behind them, %2d parked (invisible to workers)\n",
			c, info.Limit, info.Holding, info.Chained, info.Parked)
	}
}

// setLimit stores a limit for customer, for every process.
func (a *admin) setLimit(customer string, n int) {
	old := a.tally.limitChanging(customer, n)
	info, err := a.client.SetLimit(a.ctx, queue, a.key(customer), n)
	a.limitSet(customer, fmt.Sprintf("SetLimit(%d)", n), old, n, info, err)
}

// resetLimit removes customer's stored limit: the kind's 10 applies again.
func (a *admin) resetLimit(customer string) {
	old := a.tally.limitChanging(customer, 10)
	info, err := a.client.ResetLimit(a.ctx, queue, a.key(customer))
	a.limitSet(customer, "ResetLimit", old, 10, info, err)
}

func (a *admin) limitSet(customer, call string, old, n int, info *baton.KeyInfo, err error) {
	if err != nil {
		a.Check(false, fmt.Sprintf("%s %s: %v", customer, call, err))
		return
	}
	if info.Limit < 0 { // nothing of the key is left: no limit to tell
		fmt.Fprintf(a.out, "%-8s %-13s → idle: nothing holding a slot, chained or parked\n", customer, call)
		return
	}
	fmt.Fprintf(a.out, "%-8s %-13s → limit %2d: %2d holding a slot, %2d chained, %2d parked\n",
		customer, call, info.Limit, info.Holding, info.Chained, info.Parked)
	switch {
	case n > old:
		a.Check(info.Holding == n || info.Parked == 0, "raising the limit started parked deliveries in the same step")
	case n == 0:
		fmt.Fprintln(a.out, "         halted: the running deliveries finish, those chained behind them go back to wait, no other starts")
	case n < old:
		fmt.Fprintf(a.out, "         lowered: the running deliveries finish, those chained behind them go back to wait, no other starts until under %d\n", n)
	}
}

// settle waits until every lowered limit holds in the backend: the
// deliveries started before the change have finished.
func (a *admin) settle() {
	for _, c := range customers {
		limit, settling := a.tally.limitOf(c)
		for settling && a.ctx.Err() == nil {
			if info := a.keyGet(c); info.Holding <= limit {
				a.tally.settled(c)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// begin starts a phase of the scenario.
func (a *admin) begin(name string) {
	a.phase = name
	fmt.Fprintf(a.out, "Phase: %s\n", name)
}

// waitUntil waits until done, or the run's deadline.
func (a *admin) waitUntil(done func() bool) {
	for !done() && a.ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if a.ctx.Err() != nil {
		a.Check(false, fmt.Sprintf("phase %q finished in time", a.phase))
	}
}

// end records the phase's most deliveries at once per customer.
func (a *admin) end() {
	a.tally.endPhase(a.phase)
	fmt.Fprintf(a.out, "delivered so far: acme %d, globex %d, initech %d\n\n",
		a.tally.delivered("acme"), a.tally.delivered("globex"), a.tally.delivered("initech"))
}

// tally counts the deliveries running and done per customer, checking each
// start against the limit in force.
type tally struct {
	mu         sync.Mutex
	customers  map[string]*customer
	phases     []phase
	violations []string
}

type customer struct {
	limit     int  // the limit in force
	settling  bool // lowered: deliveries started under oldLimit may still run
	oldLimit  int
	running   int
	most      int         // most at once since the limit took effect
	delivered map[int]int // N → deliveries
}

type phase struct {
	name string
	most map[string][2]int // customer → most at once, limit
}

func newTally() *tally {
	t := &tally{customers: map[string]*customer{}}
	for _, c := range customers {
		t.customers[c] = &customer{limit: 10, delivered: map[int]int{}}
	}
	return t
}

func (t *tally) deliver(ctx context.Context, job *baton.Job[Webhook]) error {
	w := job.Args
	t.mu.Lock()
	c := t.customers[w.Customer]
	c.running++
	bound := c.limit
	if c.settling {
		bound = c.oldLimit
	}
	if c.running > bound {
		t.violations = append(t.violations, fmt.Sprintf("%s: %d deliveries at once, limit %d", w.Customer, c.running, bound))
	}
	if !c.settling {
		c.most = max(c.most, c.running)
	}
	t.mu.Unlock()

	var err error
	select {
	case <-time.After(delivery): // POST to the customer's endpoint
	case <-ctx.Done():
		err = ctx.Err()
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	c.running--
	if err == nil {
		c.delivered[w.N]++
	}
	return err
}

// limitChanging is told of a new limit before the backend is: a raised
// limit applies at once, a lowered one once the deliveries started under
// the old one have finished (settled).
func (t *tally) limitChanging(customer string, n int) (old int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.customers[customer]
	old = c.limit
	if n < c.limit {
		c.settling, c.oldLimit = true, max(c.oldLimit, c.limit)
	} else if !c.settling {
		c.most = c.running
	}
	c.limit = n
	return old
}

func (t *tally) settled(customer string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.customers[customer]
	c.settling, c.oldLimit, c.most = false, 0, c.running
}

func (t *tally) limitOf(customer string) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.customers[customer]
	return c.limit, c.settling
}

func (t *tally) endPhase(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := phase{name: name, most: map[string][2]int{}}
	for name, c := range t.customers {
		p.most[name] = [2]int{c.most, c.limit}
	}
	t.phases = append(t.phases, p)
}

func (t *tally) delivered(customer string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.customers[customer].delivered)
}

func (t *tally) total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, c := range t.customers {
		n += len(c.delivered)
	}
	return n
}

func (t *tally) printPhases(out io.Writer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(out, "  %-30s", "phase")
	for _, c := range customers {
		fmt.Fprintf(out, " %8s", c)
	}
	fmt.Fprintln(out)
	for _, p := range t.phases {
		fmt.Fprintf(out, "  %-30s", p.name)
		for _, c := range customers {
			fmt.Fprintf(out, " %8s", fmt.Sprintf("%d/%d", p.most[c][0], p.most[c][1]))
		}
		fmt.Fprintln(out)
	}
}

// check reports the guarantees the deliveries themselves show, and
// those of the odd deliveries' inserts (their states, by N).
func (t *tally) check(a *admin, inserted map[int]baton.JobState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range t.violations {
		a.Check(false, v)
	}
	a.Check(len(t.violations) == 0, "no customer ever ran more deliveries at once than its limit allowed")
	lost, repeated := 0, 0
	for _, name := range customers {
		for n := range perCustomer {
			switch d := t.customers[name].delivered[n]; {
			case d == 0:
				lost++
			case d > 1:
				repeated++
			}
		}
	}
	a.Check(lost == 0 && repeated == 0, fmt.Sprintf("each of the %d deliveries ran exactly once (%d lost, %d repeated)", perCustomer*len(customers), lost, repeated))
	acme := t.customers["acme"]
	a.Check(inserted[ping] == baton.JobStateDropped && acme.delivered[ping] == 0,
		fmt.Sprintf("the ping, inserted while acme was busy, was dropped (insert → %s) and never ran", inserted[ping]))
	a.Check(inserted[digest] == baton.JobStateScheduled && acme.delivered[digest] == 1,
		fmt.Sprintf("the digest, inserted while acme was busy, was rescheduled, not parked (insert → %s), and ran once", inserted[digest]))
}

package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/batonhq/baton"
)

// The demo's queues, in the order the progress shows them.
const (
	queueWebhooks = "webhooks"
	queueSync     = "sync"
	queueDigests  = "digests"
	queueBilling  = "billing"
)

var queues = []string{queueWebhooks, queueSync, queueDigests, queueBilling}

// The limits the scenario sets, which the checks hold the handlers to.
const (
	webhookLimit = 3
	syncLimit    = 1
)

// webhookArgs is one webhook delivery to a customer's endpoint. Its key is
// the customer: at most webhookLimit deliveries per customer at once.
type webhookArgs struct {
	Customer string `json:"customer"`
	Event    string `json:"event"`
	// SimulatedMS is how long the endpoint takes to answer; Flaky makes it
	// answer 502 to the first attempt.
	SimulatedMS int  `json:"simulated_ms"`
	Flaky       bool `json:"flaky,omitempty"`
}

func (webhookArgs) Kind() string { return "webhook" }

func customerKey(a webhookArgs) string { return "customer:" + a.Customer }

// syncArgs syncs one user's data. Its key is the user alone (not the
// reason): one sync per user at a time, and a twin that finds one queued
// or running is dropped.
type syncArgs struct {
	User        int    `json:"user"`
	Reason      string `json:"reason"`
	SimulatedMS int    `json:"simulated_ms"`
}

func (syncArgs) Kind() string { return "sync_user" }

func userKey(a syncArgs) string { return fmt.Sprintf("user:%d", a.User) }

// fanoutArgs is one tick of the recurring digest: its handler queues one
// digest per user.
type fanoutArgs struct {
	Tick time.Time `json:"tick"`
}

func (fanoutArgs) Kind() string { return "digest_fanout" }

// digestArgs is one user's digest of one tick.
type digestArgs struct {
	User        int       `json:"user"`
	Tick        time.Time `json:"tick"`
	SimulatedMS int       `json:"simulated_ms"`
}

func (digestArgs) Kind() string { return "digest" }

// chargeArgs charges an invoice through a payment gateway that fails the
// first two attempts.
type chargeArgs struct {
	Invoice string `json:"invoice"`
	Cents   int    `json:"cents"`
}

func (chargeArgs) Kind() string { return "charge" }

// chargeErrors are the gateway's answers to the charge's first attempts.
var chargeErrors = []string{"503 from the gateway", "gateway timeout"}

// workers registers the demo's kinds with their handlers, which report to
// r as they run.
func (r *run) workers() *baton.Workers {
	w := baton.NewWorkers()
	baton.AddWorker(w, baton.WorkFunc[webhookArgs](r.deliver), &baton.WorkerOpts{
		Queue:       queueWebhooks,
		MaxAttempts: 5,
		Backoff:     r.backoff,
		Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(customerKey), Limit: webhookLimit},
	})
	baton.AddWorker(w, baton.WorkFunc[syncArgs](r.syncUser), &baton.WorkerOpts{
		Queue:       queueSync,
		Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(userKey), Limit: syncLimit, OnBusy: baton.OnBusyDrop},
	})
	baton.AddWorker(w, baton.WorkFunc[fanoutArgs](r.fanout), &baton.WorkerOpts{Queue: queueDigests})
	baton.AddWorker(w, baton.WorkFunc[digestArgs](r.digest), &baton.WorkerOpts{Queue: queueDigests})
	baton.AddWorker(w, baton.WorkFunc[chargeArgs](r.chargeInvoice), &baton.WorkerOpts{
		Queue:       queueBilling,
		MaxAttempts: 5,
		Backoff:     r.backoff,
	})
	return w
}

// backoff waits a second (scaled) more before each retry.
func (r *run) backoff(attempt int) time.Duration { return r.d(time.Duration(attempt) * time.Second) }

// work stands for the real work of a handler: it takes ms milliseconds
// (scaled), or until the job's context ends.
func (r *run) work(ctx context.Context, ms int) error {
	t := time.NewTimer(r.d(time.Duration(ms) * time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (r *run) deliver(ctx context.Context, job *baton.Job[webhookArgs]) error {
	defer r.track.start(job.Key, job.ID, job.Fence)()
	if err := r.work(ctx, job.Args.SimulatedMS); err != nil {
		return err
	}
	if job.Args.Flaky && job.Attempt == 1 {
		r.track.retrying(job.Key, job.ID, job.Attempt, r.backoff(job.Attempt))
		return errors.New("endpoint answered 502 Bad Gateway")
	}
	return nil
}

func (r *run) syncUser(ctx context.Context, job *baton.Job[syncArgs]) error {
	defer r.track.start(job.Key, job.ID, job.Fence)()
	return r.work(ctx, job.Args.SimulatedMS)
}

// fanout is seed S3's recurring job: every tick, one digest per user. The
// tick is fired once across both worker processes.
func (r *run) fanout(ctx context.Context, job *baton.Job[fanoutArgs]) error {
	if jobs, ticks := r.ticks.fired(job.Args.Tick, job.ID); jobs == 1 && ticks == 1 && job.Attempt == 1 {
		r.screen.event("digests: the first fan-out tick queued %d digests, one per user", r.plan.users)
	}
	jobs := make([]*baton.InsertManyParams, r.plan.users)
	for u := range jobs {
		jobs[u] = &baton.InsertManyParams{Args: digestArgs{User: u, Tick: job.Args.Tick, SimulatedMS: 50 + 15*u}}
	}
	if _, err := r.clients[0].InsertMany(ctx, jobs); err != nil {
		return err
	}
	r.digestsQueued.Add(int64(len(jobs)))
	return nil
}

func (r *run) digest(ctx context.Context, job *baton.Job[digestArgs]) error {
	return r.work(ctx, job.Args.SimulatedMS)
}

// chargeInvoice fails its first two attempts, the way a flaky payment gateway
// does, and succeeds on the third.
func (r *run) chargeInvoice(ctx context.Context, job *baton.Job[chargeArgs]) error {
	if err := r.work(ctx, 120); err != nil {
		return err
	}
	if job.Attempt <= len(chargeErrors) {
		msg := chargeErrors[job.Attempt-1]
		next := r.backoff(job.Attempt)
		state := fmt.Sprintf("attempt %d failed (%s), retry in %v", job.Attempt, msg, next)
		if job.Attempt >= job.MaxAttempts {
			state = fmt.Sprintf("attempt %d failed (%s), no attempts left", job.Attempt, msg)
		}
		r.screen.event("charge %s: %s", job.Args.Invoice, state)
		r.setCharge(fmt.Sprintf("charge %s: %s", job.Args.Invoice, state))
		return errors.New(msg)
	}
	r.screen.event("charge %s: attempt %d succeeded", job.Args.Invoice, job.Attempt)
	r.setCharge(fmt.Sprintf("charge %s: attempt %d succeeded", job.Args.Invoice, job.Attempt))
	return nil
}

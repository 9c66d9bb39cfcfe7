package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/batonhq/baton"
)

// The producers: they insert the plan's jobs on time, halt and resume the
// halted key, and tell what happens.

// at waits until offset (scaled) after the start; false if ctx ended.
func (r *run) at(ctx context.Context, offset time.Duration) bool {
	t := time.NewTimer(time.Until(r.start.Add(r.d(offset))))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// abort stops the run on an error of the backend.
func (r *run) abort(err error) { r.fatal(err) }

// sabotageWebhooks is how many webhooks the "limit" sabotage inserts.
const sabotageWebhooks = 6

func (r *run) produceWebhooks(ctx context.Context) {
	hooks := r.plan.webhooks
	for i := 0; i < len(hooks); {
		if !r.at(ctx, hooks[i].at) {
			return
		}
		j := i + 1
		for hooks[i].burst != "" && j < len(hooks) && hooks[j].burst == hooks[i].burst {
			j++
		}
		jobs := make([]*baton.InsertManyParams, 0, j-i+sabotageWebhooks)
		if hooks[i].burst == "start" && r.cfg.Sabotage == "limit" {
			// First, so that nothing of the key is parked before them: a
			// job is admitted while the key's holders are fewer than its
			// own limit, here 10.
			over := &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(customerKey), Limit: 10}}
			for k := range sabotageWebhooks {
				jobs = append(jobs, &baton.InsertManyParams{Opts: over, Args: webhookArgs{
					Customer: "05", Event: fmt.Sprintf("evt_sabotage_%d", k), SimulatedMS: 1000,
				}})
			}
		}
		for _, h := range hooks[i:j] {
			jobs = append(jobs, &baton.InsertManyParams{Args: h.args})
		}
		res, err := r.clients[0].InsertMany(ctx, jobs)
		if err != nil {
			r.abort(fmt.Errorf("inserting webhooks: %w", err))
			return
		}
		parked := 0
		for _, ir := range res {
			if ir.Job.State == baton.JobStateParked {
				r.track.parked(ir.Job.Key, ir.Job.ID)
				parked++
			}
		}
		switch hooks[i].burst {
		case "start":
			r.screen.event("webhooks: a burst of %d deliveries: %d start at once, %d parked", len(res), len(res)-parked, parked)
		case "backlog":
			r.screen.event("webhooks: customer:00 resends a backlog of %d: %d parked behind %d slots", len(res), parked, webhookLimit)
		case "batch":
			r.screen.event("webhooks: customer:%02d sends a batch of %d: %d parked", haltCustomer, len(res), parked)
		case "replay":
			r.screen.event("webhooks: a partner replays %d events for every customer: %d parked", len(res), parked)
		}
		i = j
	}
}

func (r *run) produceSyncs(ctx context.Context) {
	stormTwins, stormDropped := 0, 0
	for _, s := range r.plan.syncs {
		if !r.at(ctx, s.at) {
			return
		}
		args, storm := s.args, s.user < 0
		if storm {
			// A user edits their profile twice while their sync runs.
			args.User = 0
			for _, key := range r.track.runningKeys() {
				if _, err := fmt.Sscanf(key, "user:%d", &args.User); err == nil {
					break
				}
			}
		}
		key := userKey(args)
		var opts *baton.InsertOpts
		if r.cfg.Sabotage == "twin" {
			opts = &baton.InsertOpts{Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(userKey), Limit: syncLimit, OnBusy: baton.OnBusyWait}}
		}
		runBefore, runningBefore := r.track.run(key)
		res, err := r.clients[1].Insert(ctx, args, opts)
		if err != nil {
			r.abort(fmt.Errorf("inserting a sync: %w", err))
			return
		}
		runAfter, runningAfter := r.track.run(key)
		dropped := res.Job.State == baton.JobStateDropped
		covered := runningBefore && runningAfter && runBefore == runAfter
		r.mu.Lock()
		r.sync.inserted++
		if dropped {
			r.sync.dropped++
		}
		if covered {
			r.sync.covered++
			if dropped {
				r.sync.coveredDropped++
			}
		}
		r.mu.Unlock()
		if storm {
			// Storms come in pairs of twins: tell of each pair at its second.
			stormTwins++
			if dropped {
				stormDropped++
			}
			if stormTwins == 2 {
				r.screen.event("sync: %s changed twice during its sync: %d of 2 twins dropped", key, stormDropped)
				stormTwins, stormDropped = 0, 0
			}
		}
	}
}

func (r *run) produceCharge(ctx context.Context) {
	if !r.at(ctx, chargeAt) {
		return
	}
	var opts *baton.InsertOpts
	if r.cfg.Sabotage == "retry" {
		opts = &baton.InsertOpts{MaxAttempts: 2}
	}
	res, err := r.clients[0].Insert(ctx, chargeArgs{Invoice: "inv-1042", Cents: 4999}, opts)
	if err != nil {
		r.abort(fmt.Errorf("inserting the charge: %w", err))
		return
	}
	r.mu.Lock()
	r.chargeID = res.Job.ID
	r.mu.Unlock()
	r.setCharge("charge inv-1042 queued")
}

// haltAndResume halts customer:07 with a limit of 0, then resumes it by
// removing the override (seed S14).
func (r *run) haltAndResume(ctx context.Context) {
	key := fmt.Sprintf("customer:%02d", haltCustomer)
	if !r.at(ctx, haltAt) {
		return
	}
	r.track.halting(key)
	limit := 0
	if r.cfg.Sabotage == "halt" {
		limit = webhookLimit // no halt at all
	}
	info, err := r.clients[0].SetLimit(ctx, queueWebhooks, key, limit)
	if err != nil {
		r.abort(fmt.Errorf("halting %s: %w", key, err))
		return
	}
	r.track.halted(info.Fence, info.Running)
	r.screen.event("%s %s (SetLimit %d): %d running may finish, %d parked wait",
		r.screen.paint(yellow, "halt"), key, limit, info.Running, info.Parked)
	if !r.at(ctx, resumeAt) {
		return
	}
	r.track.resuming(key)
	info, err = r.clients[0].ResetLimit(ctx, queueWebhooks, key)
	if err != nil {
		r.abort(fmt.Errorf("resuming %s: %w", key, err))
		return
	}
	r.screen.event("%s %s (ResetLimit → %d): %d start at once, %d still parked",
		r.screen.paint(green, "resume"), key, info.Limit, info.Holding, info.Parked)
}

package demo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// The scenario at scale 1. Every time below is multiplied by Config.Scale.
const (
	customers    = 20
	users        = 10
	haltCustomer = 7 // customer:07 is halted midway, then resumed

	haltAt      = 4 * time.Second
	resumeAt    = 8 * time.Second
	chargeAt    = time.Second
	backlogAt   = 3 * time.Second // customer:00 resends a backlog of webhooks
	batchAt     = 3600 * time.Millisecond
	replayAt    = 10 * time.Second
	producersTo = 15 * time.Second
	fanoutEvery = 2 * time.Second
)

// customerWeights make some customers busier than others: customer:00 is
// the noisy one, customer:07 (the one halted) is busy too.
var customerWeights = [customers]int{10, 6, 5, 4, 3, 3, 3, 6, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1}

// userWeights make some users change their data more often than others.
var userWeights = [users]int{5, 4, 3, 2, 2, 1, 1, 1, 1, 1}

// plan is what the producers insert, and when (at scale 1). It is drawn
// from a fixed seed, so every run is the same scenario.
type plan struct {
	users    int
	webhooks []plannedWebhook // by time
	syncs    []plannedSync    // by time
}

type plannedWebhook struct {
	at    time.Duration
	burst string // non-empty: inserted together with the others of the burst
	args  webhookArgs
}

type plannedSync struct {
	at time.Duration
	// user < 0: a twin storm, two twins for a user whose sync is running
	// at that moment.
	user int
	args syncArgs
}

func newPlan() *plan {
	rng := rand.New(rand.NewPCG(20240917, 42))
	p := &plan{users: users}
	event := 0
	hook := func(at time.Duration, burst string, customer int) {
		event++
		p.webhooks = append(p.webhooks, plannedWebhook{at: at, burst: burst, args: webhookArgs{
			Customer:    fmt.Sprintf("%02d", customer),
			Event:       fmt.Sprintf("evt_%04d", event),
			SimulatedMS: 200 + rng.IntN(450),
			Flaky:       rng.IntN(100) < 4,
		}})
	}
	// A burst at the start, weighted to the busy customers.
	for range 50 {
		hook(200*time.Millisecond, "start", pick(rng, customerWeights[:]))
	}
	// customer:00 resends a backlog: 30 deliveries at once, which wait for
	// its 3 slots while every other customer goes on undisturbed.
	for range 30 {
		hook(backlogAt, "backlog", 0)
	}
	// customer:07 sends a batch just before it is halted, so that the halt
	// finds it busy.
	for range 8 {
		hook(batchAt, "batch", haltCustomer)
	}
	// A partner replays a stretch of events, for every customer.
	for range 40 {
		hook(replayAt, "replay", pick(rng, customerWeights[:]))
	}
	// A steady stream until the producers stop...
	for range 180 {
		at := 500*time.Millisecond + time.Duration(rng.Int64N(int64(producersTo-time.Second)))
		hook(at, "", pick(rng, customerWeights[:]))
	}
	// ...with more for the halted customer while it is halted.
	for range 10 {
		at := haltAt + time.Duration(rng.Int64N(int64(resumeAt-haltAt)))
		hook(at, "", haltCustomer)
	}
	slices.SortStableFunc(p.webhooks, func(a, b plannedWebhook) int { return int(a.at - b.at) })

	reasons := []string{"profile edited", "webhook from CRM", "password changed", "plan upgraded"}
	for at := 300 * time.Millisecond; at < producersTo; at += 150 * time.Millisecond {
		u := pick(rng, userWeights[:])
		p.syncs = append(p.syncs, plannedSync{at: at, user: u, args: syncArgs{
			User: u, Reason: reasons[rng.IntN(len(reasons))], SimulatedMS: 500 + rng.IntN(700),
		}})
	}
	for _, at := range []time.Duration{2500 * time.Millisecond, 5500 * time.Millisecond, 9 * time.Second, 12500 * time.Millisecond} {
		for range 2 {
			p.syncs = append(p.syncs, plannedSync{at: at + time.Millisecond, user: -1, args: syncArgs{
				Reason: "profile edited twice", SimulatedMS: 500 + rng.IntN(700),
			}})
		}
	}
	slices.SortStableFunc(p.syncs, func(a, b plannedSync) int { return int(a.at - b.at) })
	return p
}

// pick draws an index with probability proportional to its weight.
func pick(rng *rand.Rand, weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n < w {
			return i
		}
		n -= w
	}
	return len(weights) - 1
}

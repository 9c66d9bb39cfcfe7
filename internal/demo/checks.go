package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton"
)

// result reads the backend's final state and checks every guarantee
// against what the handlers saw.
func (r *run) result(ctx context.Context) (*Result, error) {
	stats := map[string]*baton.QueueStats{}
	for _, q := range queues {
		st, err := r.clients[0].QueueStats(ctx, q)
		if err != nil {
			return nil, err
		}
		stats[q] = st
	}
	keys := r.track.snapshot()
	res := &Result{Elapsed: time.Since(r.start)}
	r.mu.Lock()
	res.ParkedPeak = r.parked
	for _, m := range r.outcomes {
		res.Retried += m[baton.JobOutcomeRetry]
	}
	r.mu.Unlock()
	for _, st := range stats {
		res.Processed += st.Counts[baton.JobStateCompleted]
		res.Dropped += int(st.Dropped)
	}
	for _, k := range keys {
		res.Handoffs = append(res.Handoffs, k.handoffs...)
	}
	slices.Sort(res.Handoffs)

	charge, err := r.chargeCheck(ctx)
	if err != nil {
		return nil, err
	}
	res.Checks = []Check{
		r.limitCheck(keys),
		r.haltCheck(),
		r.twinCheck(stats[queueSync]),
		charge,
		r.fanoutCheck(),
		r.terminalCheck(stats),
	}
	return res, nil
}

// limitCheck: no key ever ran more jobs at once than its limit, as its
// handlers counted them.
func (r *run) limitCheck(keys []keyStats) Check {
	c := Check{Name: "max concurrency per key ≤ its limit, at every moment", OK: true}
	type group struct{ keys, atLimit, most, limit int }
	groups := map[string]*group{}
	var over []string
	for _, k := range keys {
		if k.limit < 0 || k.maxSeen > k.limit {
			c.OK = false
			over = append(over, fmt.Sprintf("%s ran %d at once, limit %d", k.key, k.maxSeen, k.limit))
		}
		prefix, _, _ := strings.Cut(k.key, ":")
		g := groups[prefix]
		if g == nil {
			g = &group{limit: k.limit}
			groups[prefix] = g
		}
		g.keys++
		g.most = max(g.most, k.maxSeen)
		if k.maxSeen == k.limit {
			g.atLimit++
		}
	}
	if !c.OK {
		c.Detail = strings.Join(over, "; ")
		return c
	}
	var parts []string
	for _, prefix := range []string{"customer", "user"} {
		if g := groups[prefix]; g != nil {
			parts = append(parts, fmt.Sprintf("%d %ss: at most %d of %d (%d keys reached it)", g.keys, prefix, g.most, g.limit, g.atLimit))
		}
	}
	c.Detail = strings.Join(parts, "; ")
	return c
}

// haltCheck: no job of the halted key was leased while it was halted. The
// jobs that start then must hold a fence no higher than the key's last
// fence when the halt took effect: they were leased before it.
func (r *run) haltCheck() Check {
	h := r.track.haltRecord()
	c := Check{Name: "the halted key ran nothing while halted"}
	if h.from.IsZero() || h.to.IsZero() {
		c.Detail = "the key was never halted and resumed"
		return c
	}
	var early, late int
	for _, s := range h.starts {
		switch {
		case !s.at.Before(h.to): // after the resume
		case s.fence > h.fence:
			late++ // leased after the halt took effect
		case !s.at.Before(h.from):
			early++ // leased before the halt, started just after it
		}
	}
	c.OK = late == 0
	peak := 0
	for _, k := range r.track.snapshot() {
		if k.key == h.key {
			peak = k.parkedPeak
		}
	}
	c.Detail = fmt.Sprintf("%s halted for %v: %s leased after the halt (want 0); %s running at the halt finished; up to %d parked, run after the resume",
		h.key, h.to.Sub(h.from).Round(10*time.Millisecond), jobs(late), jobs(h.runningAt), peak)
	if early > 0 {
		c.Detail += fmt.Sprintf(" (%s leased just before the halt started after it)", jobs(early))
	}
	return c
}

// twinCheck: a sync inserted while its user's sync ran was dropped, and the
// backend's stats count every drop.
func (r *run) twinCheck(st *baton.QueueStats) Check {
	r.mu.Lock()
	s := r.sync
	r.mu.Unlock()
	c := Check{Name: "every twin of a running sync was dropped"}
	c.OK = s.covered > 0 && s.coveredDropped == s.covered && int(st.Dropped) == s.dropped && st.Counts[baton.JobStateDropped] == s.dropped
	c.Detail = fmt.Sprintf("%d of %d twins inserted while their user's sync ran were dropped; %d of %d inserts dropped in all, %d in the queue's stats",
		s.coveredDropped, s.covered, s.dropped, s.inserted, st.Dropped)
	if s.covered == 0 {
		c.Detail += "; no twin was inserted while its sync ran, so nothing was checked"
	}
	return c
}

// chargeCheck: the charge failed twice and succeeded on its third attempt.
func (r *run) chargeCheck(ctx context.Context) (Check, error) {
	c := Check{Name: "the fail-twice job succeeded on its 3rd attempt"}
	r.mu.Lock()
	id := r.chargeID
	r.mu.Unlock()
	if id == "" {
		c.Detail = "the charge was never inserted"
		return c, nil
	}
	row, err := r.clients[0].JobGet(ctx, queueBilling, id)
	if err != nil {
		return c, err
	}
	c.OK = row.State == baton.JobStateCompleted && row.Attempt == 3 && len(row.Errors) == 2
	c.Detail = fmt.Sprintf("charge inv-1042 is %s after %d attempts, %d errors recorded", row.State, row.Attempt, len(row.Errors))
	if c.OK {
		c.Detail = fmt.Sprintf("charge inv-1042: attempts 1 and 2 failed (%s; %s), attempt 3 completed", row.Errors[0].Error, row.Errors[1].Error)
	}
	return c, nil
}

// stopGrace is how long before the workers began to stop a tick must have
// been due for fanoutCheck to require it fired: a process whose timer for
// a tick had fired but which had not yet run (a loaded machine) when the
// stop came fires no more, and leaves no trace.
const stopGrace = 100 * time.Millisecond

// fanoutCheck: every tick while both processes ran fired exactly one
// fan-out, and every fan-out's digests ran. A tick may go unfired only if
// both processes logged that they did not insert it — stalled past it,
// come late after a later tick (the schedule's catch-up:
// baton.PeriodicJob), or given up when the insert did not finish before
// the next tick — or if it was due less than stopGrace before the
// stop began; at least one tick must fire.
func (r *run) fanoutCheck() Check {
	c := Check{Name: "the fan-out fired once per tick"}
	perTick := r.ticks.jobs()
	var missing, twice []string
	expected, fanouts, skipped := 0, 0, 0
	sched := r.periodic[0].Schedule
	for t := r.firstTick(); t.Before(r.stopAt); t = sched.Next(t) {
		expected++
		switch {
		case perTick[t.UTC()] > 0:
		case r.stopAt.Sub(t) < stopGrace:
			expected-- // cut off by the stop, or not: either is right
		case r.ticks.skippedBy(t) == len(r.clients):
			skipped++
		default:
			m := t.Local().Format("15:04:05.000")
			if n := r.ticks.skippedBy(t); n > 0 {
				m += fmt.Sprintf(" (logged skipped by %d of %d processes)", n, len(r.clients))
			}
			missing = append(missing, m)
		}
	}
	for t, n := range perTick {
		fanouts += n
		if n > 1 {
			twice = append(twice, fmt.Sprintf("%s had %d fan-out jobs", t.Local().Format("15:04:05.000"), n))
		}
	}
	digests := r.outcome("digest", baton.JobOutcomeCompleted)
	want := int(r.digestsQueued.Load())
	c.OK = expected > 0 && fanouts > 0 && len(missing) == 0 && len(twice) == 0 && digests == want && want == fanouts*r.plan.users
	c.Detail = fmt.Sprintf("%d ticks (every %v) while the workers ran: %d fan-outs; %d of %d digests ran", expected, r.every, fanouts, digests, want)
	if skipped > 0 {
		c.Detail += fmt.Sprintf("; %s skipped by both processes, stalled, late or given up, as logged", plural(skipped, "tick"))
	}
	if len(missing) > 0 {
		c.Detail += "; ticks never fired: " + strings.Join(missing, ", ")
	}
	if len(twice) > 0 {
		slices.Sort(twice)
		c.Detail += "; ticks fired twice: " + strings.Join(twice, ", ")
	}
	return c
}

// jobs is "1 job" or "n jobs".
func jobs(n int) string { return plural(n, "job") }

// terminalCheck: every job inserted ended — completed, dropped, dead or
// cancelled — and none is left queued or running.
func (r *run) terminalCheck(stats map[string]*baton.QueueStats) Check {
	c := Check{Name: "every job reached a terminal state"}
	var completed, dropped, dead, remaining int
	for _, st := range stats {
		completed += st.Counts[baton.JobStateCompleted]
		dropped += st.Counts[baton.JobStateDropped]
		dead += st.Counts[baton.JobStateDead] + st.Counts[baton.JobStateCancelled]
		remaining += left(st)
	}
	r.mu.Lock()
	inserted := r.webhooksTotal + r.sync.inserted
	if r.chargeID != "" {
		inserted++
	}
	r.mu.Unlock()
	for _, n := range r.ticks.jobs() {
		inserted += n // the fan-outs, inserted by the schedule
	}
	inserted += int(r.digestsQueued.Load())
	ended := completed + dropped + dead
	c.OK = remaining == 0 && ended == inserted
	c.Detail = fmt.Sprintf("%d jobs: %d completed, %d dropped, %d dead, %d left", ended+remaining, completed, dropped, dead, remaining)
	if ended+remaining != inserted {
		c.Detail += fmt.Sprintf(" (%d were inserted)", inserted)
	}
	return c
}

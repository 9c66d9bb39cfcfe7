package lockcheck

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// maxReported is how many violations of one check an error lists.
const maxReported = 5

// Violation is the error of a check that failed: how many violations it
// found, and descriptions of the first ones. Times in descriptions are
// relative to the earliest call of the history checked.
type Violation struct {
	// Check names the check: "history", "overlap", "fences", "fifo",
	// "linearizability" or "prompt".
	Check string
	Count int
	First []string
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lockcheck: %s: %d violation(s)", v.Check, v.Count)
	if len(v.First) < v.Count {
		fmt.Fprintf(&b, ", the first %d", len(v.First))
	}
	b.WriteString(":")
	for _, s := range v.First {
		b.WriteString("\n  - ")
		b.WriteString(strings.ReplaceAll(s, "\n", "\n    "))
	}
	return b.String()
}

// Violations returns the Violations in err, which Check joins.
func Violations(err error) []*Violation {
	var out []*Violation
	var walk func(error)
	walk = func(err error) {
		if v, ok := err.(*Violation); ok {
			out = append(out, v)
			return
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if e := errors.Unwrap(err); e != nil {
			walk(e)
		}
	}
	if err != nil {
		walk(err)
	}
	return out
}

// Options tune Check. nil means the defaults.
type Options struct {
	// LinearizabilityTimeout bounds the linearizability search of each key.
	// A search that runs out of time is reported as a violation (the
	// history could not be shown linearizable). Default 20s.
	LinearizabilityTimeout time.Duration
	// Faults tells that the history was recorded through faults: a lease
	// may end while held (at its Lost time, or unseen by its holder while
	// its release was on the way), so a release that finds it gone is no
	// violation, and linearizability lets the backend drop a holder
	// between its hold's end and its release's return.
	Faults bool
	// Prompt, if positive, runs CheckPrompt with it: no call or release
	// may return later than that after its deadline.
	Prompt time.Duration
	// Isolations are the spans in which processes were cut off from the
	// backend. First come, first served is not promised to a waiter cut
	// off while it waited: a grant it could not hear of before the
	// grant's TTL ran out is lost, and it queues again at the back. The
	// FIFO check leaves such waiters out.
	Isolations []Isolation
}

// Isolation is a span of time, in Now values, in which process Proc was
// cut off from the backend (a network partition).
type Isolation struct {
	Proc     int
	From, To int64
}

// isolated reports whether e's process was cut off while e waited.
func isolated(isolations []Isolation, e *Event) bool {
	for _, is := range isolations {
		if is.Proc == e.Proc && is.From <= e.Return && is.To >= e.Queued {
			return true
		}
	}
	return false
}

// Check runs every checker on h and returns their Violations joined, or nil.
// A malformed history (see CheckWellFormed) is reported alone.
func Check(h []Event, opts *Options) error {
	if err := CheckWellFormed(h); err != nil {
		return err
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.LinearizabilityTimeout <= 0 {
		o.LinearizabilityTimeout = 20 * time.Second
	}
	var prompt error
	if o.Prompt > 0 {
		prompt = CheckPrompt(h, o.Prompt)
	}
	return errors.Join(CheckOverlap(h), CheckFences(h), checkFIFO(h, o.Isolations),
		checkLinearizable(h, o.LinearizabilityTimeout, o.Faults), prompt)
}

// collector counts one check's violations and keeps the first ones.
type collector struct {
	check string
	count int
	first []string
}

func (c *collector) add(format string, args ...any) {
	c.count++
	if len(c.first) < maxReported {
		c.first = append(c.first, fmt.Sprintf(format, args...))
	}
}

func (c *collector) err() error {
	if c.count == 0 {
		return nil
	}
	return &Violation{Check: c.check, Count: c.count, First: c.first}
}

// base is the time descriptions are relative to.
func base(h []Event) int64 {
	b := int64(math.MaxInt64)
	for i := range h {
		b = min(b, h[i].Call)
	}
	return b
}

func rel(t, base int64) string {
	d := time.Duration(t - base)
	if d >= time.Millisecond {
		d = d.Round(time.Microsecond)
	}
	return "+" + d.String()
}

// describe renders e for a violation report.
func (e *Event) describe(base int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "p%d/g%d %s %q", e.Proc, e.G, e.Kind, e.Key)
	if e.OK {
		fmt.Fprintf(&b, " fence %d", e.Fence)
	} else {
		b.WriteString(" not granted")
		if e.Err != "" {
			fmt.Fprintf(&b, " (%s)", e.Err)
		}
	}
	fmt.Fprintf(&b, " [call %s", rel(e.Call, base))
	if e.Queued != 0 {
		fmt.Fprintf(&b, ", queued %s", rel(e.Queued, base))
	}
	fmt.Fprintf(&b, ", return %s", rel(e.Return, base))
	if e.Lost != 0 {
		fmt.Fprintf(&b, ", lease lost %s", rel(e.Lost, base))
	}
	if e.Killed != 0 {
		fmt.Fprintf(&b, ", process killed %s", rel(e.Killed, base))
	}
	if e.ReleaseCall != 0 {
		fmt.Fprintf(&b, ", release %s..%s %s", rel(e.ReleaseCall, base), rel(e.ReleaseReturn, base), e.Release)
	} else if e.OK {
		b.WriteString(", never released")
	}
	b.WriteString("]")
	return b.String()
}

// byKey groups h's events by key, keys in order, events in h's order.
func byKey(h []Event) (keys []string, groups map[string][]*Event) {
	groups = make(map[string][]*Event)
	for i := range h {
		k := h[i].Key
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], &h[i])
	}
	slices.Sort(keys)
	return keys, groups
}

func granted(evs []*Event) []*Event {
	var out []*Event
	for _, e := range evs {
		if e.OK {
			out = append(out, e)
		}
	}
	return out
}

// CheckWellFormed reports events that no correct recording produces:
// times out of order, a grant without a fence, a release of a slot that was
// not granted, or keys whose events disagree on the limit.
func CheckWellFormed(h []Event) error {
	c := &collector{check: "history"}
	b := base(h)
	limits := make(map[string]int)
	for i := range h {
		e := &h[i]
		bad := func(why string) { c.add("%s: %s", why, e.describe(b)) }
		switch {
		case e.Kind != Acquire && e.Kind != TryAcquire:
			bad("unknown kind")
		case e.Key == "":
			bad("empty key")
		case e.Limit < 1:
			bad("limit below 1")
		case e.Call <= 0 || e.Return < e.Call:
			bad("call/return out of order")
		case e.Queued != 0 && (e.Kind != Acquire || e.Queued < e.Call || e.Queued > e.Return):
			bad("queued time on a TryAcquire or outside the call")
		case e.OK && e.Fence == 0:
			bad("grant without a fence")
		case !e.OK && (e.Fence != 0 || e.Release != NotReleased || e.ReleaseCall != 0 || e.Lost != 0 || e.Killed != 0):
			bad("fence, loss, kill or release without a grant")
		case e.Killed != 0 && e.Killed < e.Return:
			bad("holder killed before its grant returned")
		case e.Lost != 0 && e.Lost < e.Call:
			bad("lease lost before its call")
		case (e.Release == NotReleased) != (e.ReleaseCall == 0):
			bad("release result without a release call, or the reverse")
		case e.ReleaseCall != 0 && (e.ReleaseCall < e.Return || e.ReleaseReturn < e.ReleaseCall):
			bad("release out of order")
		case e.Release != NotReleased && e.Release != Released && e.Release != NotHeld && e.Release != ReleaseFailed:
			bad("unknown release result")
		}
		if l, ok := limits[e.Key]; ok && l != e.Limit {
			bad(fmt.Sprintf("limit %d differs from the key's %d", e.Limit, l))
		} else if !ok {
			limits[e.Key] = e.Limit
		}
	}
	return c.err()
}

// HoldEnd is when e's holder stopped believing it held its slot: the call
// of its release, the loss of its lease or the kill of its process,
// whichever came first; 0 if none (it held until the history ended).
func (e *Event) HoldEnd() int64 {
	end := int64(0)
	for _, t := range []int64{e.Lost, e.Killed, e.ReleaseCall} {
		if t != 0 && (end == 0 || t < end) {
			end = t
		}
	}
	return end
}

// CheckOverlap verifies that each key's holders never outnumber its limit:
// a holder counts from the return of its grant to the call of its release,
// the loss of its lease or the kill of its process, whichever is first
// (for ever if none came),
// the span in which it believed it held the slot. A grant whose lease was
// lost before it returned (its reply came after the lease's Until) was
// never trusted and counts for nothing. A sweep over those spans
// reports every grant that took a key above its limit, with the holders at
// that instant.
func CheckOverlap(h []Event) error {
	c := &collector{check: "overlap"}
	b := base(h)
	keys, groups := byKey(h)
	for _, k := range keys {
		type point struct {
			t   int64
			end bool
			e   *Event
		}
		var pts []point
		limit := 0
		for _, e := range granted(groups[k]) {
			limit = e.Limit
			end := e.HoldEnd()
			if end != 0 && end <= e.Return {
				continue // lost before it returned: never trusted
			}
			pts = append(pts, point{t: e.Return, e: e})
			if end != 0 {
				pts = append(pts, point{t: end, end: true, e: e})
			}
		}
		// At one instant, a release happens before a grant: spans are
		// half-open [grant return, hold end).
		slices.SortStableFunc(pts, func(x, y point) int {
			if c := cmp.Compare(x.t, y.t); c != 0 {
				return c
			}
			switch {
			case x.end && !y.end:
				return -1
			case !x.end && y.end:
				return 1
			}
			return 0
		})
		active := make(map[*Event]struct{})
		for _, p := range pts {
			if p.end {
				delete(active, p.e)
				continue
			}
			active[p.e] = struct{}{}
			if len(active) <= limit {
				continue
			}
			holders := make([]*Event, 0, len(active))
			for e := range active {
				holders = append(holders, e)
			}
			slices.SortFunc(holders, func(x, y *Event) int { return cmp.Compare(x.Fence, y.Fence) })
			lines := make([]string, len(holders))
			for i, e := range holders {
				lines[i] = e.describe(b)
			}
			c.add("key %q (limit %d) had %d holders at %s, when fence %d was granted:\n%s",
				k, limit, len(holders), rel(p.t, b), p.e.Fence, strings.Join(lines, "\n"))
		}
	}
	return c.err()
}

// CheckFences verifies that each key's fences are unique and follow real
// time: if grant A returned before grant B was called, A's fence is below
// B's.
func CheckFences(h []Event) error {
	c := &collector{check: "fences"}
	b := base(h)
	keys, groups := byKey(h)
	for _, k := range keys {
		g := granted(groups[k])
		seen := make(map[uint64]*Event)
		for _, e := range g {
			if first, ok := seen[e.Fence]; ok {
				c.add("key %q: fence %d granted twice:\n%s\n%s", k, e.Fence, first.describe(b), e.describe(b))
				continue
			}
			seen[e.Fence] = e
		}
		precedes(g, func(e *Event) int64 { return e.Return }, func(a, x *Event) {
			if a.Fence > x.Fence {
				c.add("key %q: fence %d was granted after fence %d had returned:\n%s\n%s",
					k, x.Fence, a.Fence, a.describe(b), x.describe(b))
			}
		})
	}
	return c.err()
}

// CheckFIFO verifies that each key serves its waiters first come, first
// served, with no barging: if waiter A was surely queued (its Queued time)
// before X was called, and both were granted, A's fence is below X's. X may
// be an Acquire, which must queue behind A, or a TryAcquire, which must not
// overtake A.
func CheckFIFO(h []Event) error { return checkFIFO(h, nil) }

// checkFIFO is CheckFIFO leaving out waiters cut off while they waited.
func checkFIFO(h []Event, isolations []Isolation) error {
	c := &collector{check: "fifo"}
	b := base(h)
	keys, groups := byKey(h)
	for _, k := range keys {
		var waiters []*Event
		g := granted(groups[k])
		for _, e := range g {
			if e.Queued != 0 && !isolated(isolations, e) {
				waiters = append(waiters, e)
			}
		}
		precedesFrom(waiters, g, func(e *Event) int64 { return e.Queued }, func(a, x *Event) {
			if a.Fence <= x.Fence {
				return
			}
			what := "overtook"
			if x.Kind == TryAcquire {
				what = "barged ahead of"
			}
			c.add("key %q: %s %s waiter %s (queued at %s, before the call at %s):\n%s\n%s",
				k, x.Kind, what, fmt.Sprintf("p%d/g%d", a.Proc, a.G), rel(a.Queued, b), rel(x.Call, b),
				a.describe(b), x.describe(b))
		})
	}
	return c.err()
}

// precedes calls check(a, x) for each x in evs with the event a of highest
// fence among those whose at(a) is before x's call, if any.
func precedes(evs []*Event, at func(*Event) int64, check func(a, x *Event)) {
	precedesFrom(evs, evs, at, check)
}

// precedesFrom is precedes with the candidates for a taken from from.
func precedesFrom(from, evs []*Event, at func(*Event) int64, check func(a, x *Event)) {
	byAt := slices.Clone(from)
	slices.SortFunc(byAt, func(x, y *Event) int { return cmp.Compare(at(x), at(y)) })
	byCall := slices.Clone(evs)
	slices.SortFunc(byCall, func(x, y *Event) int { return cmp.Compare(x.Call, y.Call) })
	var best *Event
	i := 0
	for _, x := range byCall {
		for ; i < len(byAt) && at(byAt[i]) < x.Call; i++ {
			if best == nil || byAt[i].Fence > best.Fence {
				best = byAt[i]
			}
		}
		if best != nil && best != x {
			check(best, x)
		}
	}
}

// Summary counts what a history holds, to show that a run contended.
type Summary struct {
	Events, Procs, Keys int
	// Grants are granted operations; Queued, the Acquires that had to wait.
	Grants, Queued int
	// TryFailed are TryAcquires that found no free slot; TimedOut, Acquires
	// that gave up when their context ended; Errors, other failures.
	TryFailed, TimedOut, Errors int
	// NotHeld and ReleaseFailed count releases with those results.
	NotHeld, ReleaseFailed int
	// Lost counts grants whose lease was lost while held (Event.Lost);
	// LostOnArrival, those lost before their grant returned.
	Lost, LostOnArrival int
	// Killed counts grants whose holder's process was killed while it
	// held (Event.Killed).
	Killed int
	// Late is the latest that a call or release returned after its
	// deadline (0 if none did).
	Late time.Duration
}

// Summarize counts h.
func Summarize(h []Event) Summary {
	var s Summary
	procs := make(map[int]bool)
	keys := make(map[string]bool)
	for i := range h {
		e := &h[i]
		s.Events++
		procs[e.Proc], keys[e.Key] = true, true
		if e.Queued != 0 {
			s.Queued++
		}
		switch {
		case e.OK:
			s.Grants++
		case e.Err == errTimeout:
			s.TimedOut++
		case e.Err != "":
			s.Errors++
		case e.Kind == TryAcquire:
			s.TryFailed++
		}
		if e.Lost != 0 {
			s.Lost++
			if e.Lost < e.Return {
				s.LostOnArrival++
			}
		}
		if e.Killed != 0 {
			s.Killed++
		}
		if e.Deadline != 0 {
			s.Late = max(s.Late, time.Duration(e.Return-e.Deadline))
		}
		if e.ReleaseDeadline != 0 && e.ReleaseCall != 0 {
			s.Late = max(s.Late, time.Duration(e.ReleaseReturn-e.ReleaseDeadline))
		}
		switch e.Release {
		case NotHeld:
			s.NotHeld++
		case ReleaseFailed:
			s.ReleaseFailed++
		}
	}
	s.Procs, s.Keys = len(procs), len(keys)
	return s
}

func (s Summary) String() string {
	str := fmt.Sprintf("%d events from %d processes on %d keys: %d grants, %d queued, %d tries failed, %d timed out, %d errors, %d leases lost (%d on arrival), %d releases not held, %d failed",
		s.Events, s.Procs, s.Keys, s.Grants, s.Queued, s.TryFailed, s.TimedOut, s.Errors, s.Lost, s.LostOnArrival, s.NotHeld, s.ReleaseFailed)
	if s.Killed > 0 {
		str += fmt.Sprintf(", %d holds cut off by a kill", s.Killed)
	}
	if s.Late > 0 {
		str += fmt.Sprintf("; latest return %v after its deadline", s.Late.Round(time.Microsecond))
	}
	return str
}

// CheckPrompt verifies that no caller hung: every acquire, and every
// release, returned within slack of its deadline (Event.Deadline,
// ReleaseDeadline; a call without one is not checked), and every call that
// failed other than by its deadline or "not acquired" says what failed: its
// error begins with `batonlock: acquire "KEY"`. Acquire is allowed 100ms
// past its deadline to give its place back; slack should add room for a
// loaded machine.
func CheckPrompt(h []Event, slack time.Duration) error {
	c := &collector{check: "prompt"}
	b := base(h)
	late := func(deadline, ret int64) time.Duration {
		if deadline == 0 {
			return 0
		}
		return time.Duration(ret - deadline)
	}
	for i := range h {
		e := &h[i]
		switch {
		case late(e.Deadline, e.Return) > slack:
			c.add("call returned %v after its deadline: %s", late(e.Deadline, e.Return), e.describe(b))
		case e.ReleaseCall != 0 && late(e.ReleaseDeadline, e.ReleaseReturn) > slack:
			c.add("release returned %v after its deadline: %s", late(e.ReleaseDeadline, e.ReleaseReturn), e.describe(b))
		case e.Err != "" && e.Err != errTimeout && !strings.HasPrefix(e.Err, fmt.Sprintf("batonlock: acquire %q: ", e.Key)):
			c.add("error does not name the call and key: %q: %s", e.Err, e.describe(b))
		}
	}
	return c.err()
}

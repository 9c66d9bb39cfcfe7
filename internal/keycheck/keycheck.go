// Package keycheck checks histories of keyed job executions against what
// Baton promises of a concurrency key (docs/concurrency.md):
//
//   - no more executions of a key overlap in time than its limit;
//   - fences are unique per key, a job's runs included (every lease has
//     its own: one fence twice is one lease run twice), and for keys of
//     limit 1 they follow real time: an execution that ended before
//     another started has the smaller fence. (With a larger limit two
//     leases granted together may start their handlers in either order,
//     so only uniqueness is checked.)
//
// An execution is the time its handler ran: from just after its fetch
// (inside the lease) to just before its outcome was recorded, or to the
// moment its process was killed. Processes on one machine record with
// lockcheck.Now (CLOCK_MONOTONIC), so their histories merge. Since a job
// holds its key's slot from admission until its outcome is recorded (or
// its lease expires, after a kill), executions nest inside slot holdings:
// any overlap beyond the limit is a real violation, not a recording
// artefact.
//
// A history may contain runs whose lease was lost while their handler ran
// (a heartbeat late; Lost). They are checked like any other, from their
// start to their handler's return: the client ends a handler's context
// before the server can let its lease go (LeaseTTL less a margin, counted
// from the renewal's request), so a handler that stops when its context
// ends still ran inside its slot holding. A run more can only add overlap
// and fence constraints, so such runs hide no violation. Nor is slack
// allowed for them: it would hide a client whose context outlived the
// server's lease. A handler that ran on past the server's expiry (a timer
// fired late on a loaded machine) is reported as the overlap it made, its
// run marked "lease lost" in the message, to tell it from a wrong grant.
package keycheck

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Execution is one run of a keyed job's handler.
type Execution struct {
	Job   string
	Key   string
	Fence int64
	Start int64 // lockcheck.Now when the handler started
	End   int64 // when it returned, or its process was killed; 0: never (the history ended first)
	// Lost reports that its lease was lost while it ran: its handler's
	// context ended with ErrLeaseLost. Only messages use it.
	Lost bool
}

// Check verifies the executions; limits holds each key's limit, which must
// not have changed during the history. It returns nil or an error listing
// the violations (at most 20).
func Check(execs []Execution, limits map[string]int) error {
	var bad []string
	add := func(format string, args ...any) {
		if len(bad) < 20 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	byKey := map[string][]Execution{}
	for _, e := range execs {
		if _, ok := limits[e.Key]; !ok {
			add("job %s: key %q has no limit", e.Job, e.Key)
			continue
		}
		if e.End != 0 && e.End < e.Start {
			add("job %s: ends before it starts", e.Job)
		}
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		es := byKey[k]
		checkOverlap(k, es, limits[k], add)
		checkFences(k, es, limits[k] == 1, add)
	}
	if len(bad) == 0 {
		return nil
	}
	return errors.New("keycheck: " + strings.Join(bad, "\n  "))
}

// checkOverlap sweeps the executions' starts and ends in time order: an
// end at the same instant as a start counts first. A violation lists the
// executions running.
func checkOverlap(key string, es []Execution, limit int, add func(string, ...any)) {
	type edge struct {
		at    int64
		delta int
		i     int // into es
	}
	var edges []edge
	for i, e := range es {
		edges = append(edges, edge{e.Start, +1, i})
		if e.End != 0 {
			edges = append(edges, edge{e.End, -1, i})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta))
	})
	running := map[int]bool{}
	for _, e := range edges {
		if e.delta < 0 {
			delete(running, e.i)
			continue
		}
		// A run that ended as it started (its end, sorted first, is
		// swept already) is running at this instant only.
		running[e.i] = true
		instant := es[e.i].End != 0 && es[e.i].End == es[e.i].Start
		if len(running) > limit {
			var names []string
			for _, i := range slices.Sorted(maps.Keys(running)) {
				names = append(names, name(es[i]))
			}
			add("key %q: %d executions at once (limit %d) when %s started: %s",
				key, len(running), limit, name(es[e.i]), strings.Join(names, ", "))
		}
		if instant {
			delete(running, e.i)
		}
	}
}

// name names an execution in a message.
func name(e Execution) string {
	s := fmt.Sprintf("job %s (fence %d", e.Job, e.Fence)
	if e.Lost {
		s += ", lease lost"
	}
	return s + ")"
}

// checkFences requires unique fences and, if ordered, smaller fences for
// executions that ended before another started: with one slot, the next
// lease is granted only after the last one's execution ended.
func checkFences(key string, es []Execution, ordered bool, add func(string, ...any)) {
	seen := map[int64]string{}
	for _, e := range es {
		if e.Fence <= 0 {
			add("key %q: job %s ran without a fence", key, e.Job)
			continue
		}
		if other, dup := seen[e.Fence]; dup && other != e.Job {
			add("key %q: fence %d given to jobs %s and %s", key, e.Fence, other, e.Job)
		} else if dup {
			// Every lease has a fence of its own: one lease run twice.
			add("key %q: job %s ran twice with fence %d", key, e.Job, e.Fence)
		}
		seen[e.Fence] = e.Job
	}
	if !ordered {
		return
	}
	// Runs that never ended (End 0) ended before nobody: leave them out, or
	// they would sort first and stop the sweep below at once.
	ended := slices.DeleteFunc(slices.Clone(es), func(e Execution) bool { return e.End == 0 })
	slices.SortFunc(ended, func(a, b Execution) int { return cmp.Compare(a.End, b.End) })
	started := slices.Clone(es)
	slices.SortFunc(started, func(a, b Execution) int { return cmp.Compare(a.Start, b.Start) })
	// For each execution in start order, every execution that ended before
	// it started must have a smaller fence: compare with the largest such.
	var most Execution
	i := 0
	for _, s := range started {
		for i < len(ended) && ended[i].End < s.Start {
			if ended[i].Fence > most.Fence {
				most = ended[i]
			}
			i++
		}
		if most.Job != "" && most.Fence >= s.Fence {
			add("key %q: %s started after %s ended, with fence %d not above %d",
				key, name(s), name(most), s.Fence, most.Fence)
		}
	}
}

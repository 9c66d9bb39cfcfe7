package lockcheck

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// The linearizability model is a semaphore per key: a set of holders out of
// limit slots and the last fence issued. Only granted operations and their
// releases enter the history: an operation that was not granted changes
// nothing a caller can observe (a waiter that gave up may have been granted
// and given the slot back within its call, which only skips fences), so it
// is valid anywhere and is left out.
//
// Through faults a lease can end while held: its holder loses it (Lost) or
// its release finds the backend dropped it. The backend then dropped it at
// some instant between the end of its hold (Event.HoldEnd) and its
// release's return, so the release becomes an end of the hold over that
// span, which removes the holder whatever it reports ("not held": the
// backend dropped it first). The model still caps the holders at the limit
// and makes fences rise, with each hold ending within its span.

// semInput is one operation on the semaphore: a grant or a release of the
// slot granted to event id.
type semInput struct {
	release bool
	id      int
	ev      *Event
}

// semOutput is what the operation reported.
type semOutput struct {
	fence  uint64        // of a grant
	result ReleaseResult // of a release
}

// semState is the semaphore: holders are the sorted event ids of the
// holders, encoded so that the state compares with ==.
type semState struct {
	last    uint64
	holders string
}

func (s semState) ids() []int {
	if s.holders == "" {
		return nil
	}
	parts := strings.Split(s.holders, ",")
	ids := make([]int, len(parts))
	for i, p := range parts {
		ids[i], _ = strconv.Atoi(p)
	}
	return ids
}

func encodeIDs(ids []int) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}

// semModel is the model of one key with limit slots; with faults a release
// that reports "not held" may drop a holder (its lease ran out first).
func semModel(limit int, faults bool) porcupine.Model {
	m := &porcupine.NondeterministicModel{
		Init: func() []any { return []any{semState{}} },
		Step: func(state, input, output any) []any {
			s, in, out := state.(semState), input.(semInput), output.(semOutput)
			ids := s.ids()
			pos, held := slices.BinarySearch(ids, in.id)
			if !in.release {
				if held || len(ids) >= limit || out.fence <= s.last {
					return nil
				}
				return []any{semState{last: out.fence, holders: encodeIDs(slices.Insert(ids, pos, in.id))}}
			}
			if !held {
				// A release that found nothing (or whose outcome is
				// unknown) changes nothing. With faults, an end of a hold
				// that was lost before its grant returned can come before
				// the grant, which then keeps its slot: a worse order that
				// the search may try.
				if out.result == Released {
					return nil
				}
				return []any{s}
			}
			removed := semState{last: s.last, holders: encodeIDs(slices.Delete(slices.Clone(ids), pos, pos+1))}
			switch out.result {
			case Released:
				return []any{removed}
			case NotHeld: // the backend dropped it first, through faults
				if faults {
					return []any{removed}
				}
			case NotReleased, ReleaseFailed: // it may or may not have taken effect yet
				return []any{removed, s}
			}
			return nil
		},
		Hash: func(state any) uint64 {
			s := state.(semState)
			h := fnv.New64a()
			_, _ = h.Write([]byte(s.holders))
			return h.Sum64() ^ s.last
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(semInput), output.(semOutput)
			if in.release {
				return fmt.Sprintf("release(#%d fence %d) -> %s", in.id, in.ev.Fence, out.result)
			}
			return fmt.Sprintf("grant(#%d) -> fence %d", in.id, out.fence)
		},
		DescribeState: func(state any) string {
			s := state.(semState)
			return fmt.Sprintf("holders {%s}, last fence %d", s.holders, s.last)
		},
	}
	return m.ToModel()
}

// CheckLinearizable verifies, key by key, that the grants and releases are
// linearizable as a semaphore of the key's limit whose grants take fences
// above every fence issued before: a grant is valid only while fewer than
// limit slots are held; a release reporting success only by a holder, and
// one reporting "not held" only by a non-holder. The search of each key is
// bounded by timeout; one that runs out is reported as a violation. It
// takes the history as fault-free (Check with Options.Faults does not).
func CheckLinearizable(h []Event, timeout time.Duration) error {
	return checkLinearizable(h, timeout, false)
}

func checkLinearizable(h []Event, timeout time.Duration, faults bool) error {
	c := &collector{check: "linearizability"}
	b := base(h)
	keys, groups := byKey(h)
	for _, k := range keys {
		g := granted(groups[k])
		if len(g) == 0 {
			continue
		}
		var ops []porcupine.Operation
		for id, e := range g {
			ops = append(ops, porcupine.Operation{
				ClientId: id, Input: semInput{id: id, ev: e}, Call: e.Call,
				Output: semOutput{fence: e.Fence}, Return: e.Return,
			})
			call := e.ReleaseCall
			if faults {
				call = e.HoldEnd()
			}
			if call == 0 {
				continue
			}
			ret := e.ReleaseReturn
			if e.Release == ReleaseFailed || e.Release == NotReleased {
				ret = math.MaxInt64 // it may take effect at any later time
			}
			ops = append(ops, porcupine.Operation{
				ClientId: id, Input: semInput{release: true, id: id, ev: e}, Call: call,
				Output: semOutput{result: e.Release}, Return: ret,
			})
		}
		model := semModel(g[0].Limit, faults)
		switch porcupine.CheckOperationsTimeout(model, ops, timeout) {
		case porcupine.Ok:
		case porcupine.Unknown:
			c.add("key %q: search for a linearization of %d operations timed out after %v", k, len(ops), timeout)
		default:
			c.add("%s", explain(k, model, ops, timeout, b))
		}
	}
	return c.err()
}

// explain describes why the operations of key cannot be linearized: the
// longest linearizable prefix found, and the earliest-called operations that
// cannot follow it.
func explain(key string, model porcupine.Model, ops []porcupine.Operation, timeout time.Duration, b int64) string {
	_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	var longest []int
	for _, partition := range info.PartialLinearizations() {
		for _, lin := range partition {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	describe := func(op porcupine.Operation) string {
		in, out := op.Input.(semInput), op.Output.(semOutput)
		if in.release {
			return fmt.Sprintf("release %s by %s", out.result, in.ev.describe(b))
		}
		return "grant to " + in.ev.describe(b)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "key %q (limit %d): not linearizable; the longest linearizable prefix orders %d of %d operations",
		key, ops[0].Input.(semInput).ev.Limit, len(longest), len(ops))
	if n := len(longest); n > 0 {
		s.WriteString(", ending:")
		for _, id := range longest[max(0, n-3):] {
			s.WriteString("\n  " + describe(ops[id]))
		}
	}
	in := make(map[int]bool, len(longest))
	for _, id := range longest {
		in[id] = true
	}
	var rest []int
	for id := range ops {
		if !in[id] {
			rest = append(rest, id)
		}
	}
	slices.SortFunc(rest, func(x, y int) int { return cmp.Compare(ops[x].Call, ops[y].Call) })
	if len(rest) > 0 {
		s.WriteString("\nno order extends it with the next operations:")
		for _, id := range rest[:min(3, len(rest))] {
			s.WriteString("\n  " + describe(ops[id]))
		}
	}
	return s.String()
}

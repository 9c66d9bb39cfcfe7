package lockcheck

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The tests are named TestContention* so that one -run 'Contention|Broken'
// runs them with the contention tests of the drivers.
//
// Hand-written histories. Times are small integers (nanoseconds); g names
// the goroutine so that reports can be matched.

// held is a grant of key k (limit l) to goroutine g, called at call,
// returned at ret with fence, released over [rel, rel+1] successfully.
func held(g int, k string, l int, call, ret int64, fence uint64, rel int64) Event {
	return Event{
		Proc: 0, G: g, Key: k, Limit: l, Kind: Acquire, Call: call, Return: ret,
		OK: true, Fence: fence, ReleaseCall: rel, ReleaseReturn: rel + 1, Release: Released,
	}
}

func try(e Event) Event { e.Kind = TryAcquire; return e }

func queued(e Event, at int64) Event { e.Queued = at; return e }

func TestContentionCheckValid(t *testing.T) {
	t.Parallel()
	h := []Event{
		// A mutex passed along three holders, one of which waited.
		held(1, "m", 1, 1, 2, 1, 10),
		queued(held(2, "m", 1, 3, 12, 2, 20), 4),
		try(held(3, "m", 1, 21, 22, 3, 30)),
		// A TryAcquire that found the key busy, and an Acquire that gave up.
		{G: 4, Key: "m", Limit: 1, Kind: TryAcquire, Call: 5, Return: 6},
		{G: 5, Key: "m", Limit: 1, Kind: Acquire, Call: 7, Queued: 8, Return: 9, Err: errTimeout},
		// A semaphore of 3 with three overlapping holders; the fourth
		// waits for the first release. Concurrent calls may be granted in
		// either order (fence 12 returned before fence 11).
		held(1, "s", 3, 1, 5, 11, 40),
		held(2, "s", 3, 2, 4, 12, 50),
		held(3, "s", 3, 3, 6, 13, 60),
		queued(held(4, "s", 3, 7, 42, 14, 70), 8),
		// A release whose outcome is unknown, and a holder that never
		// released (the history ended).
		func() Event { e := held(5, "s", 3, 71, 72, 15, 80); e.Release = ReleaseFailed; return e }(),
		func() Event {
			e := held(6, "s", 3, 81, 82, 16, 0)
			e.ReleaseCall, e.ReleaseReturn, e.Release = 0, 0, ""
			return e
		}(),
	}
	if err := Check(h, nil); err != nil {
		t.Fatalf("valid history reported:\n%v", err)
	}
}

func TestContentionCheckViolations(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    []Event
		// want are the checks that must fail, each with a substring of its report.
		want map[string]string
	}{
		{
			name: "two holders of a mutex",
			h: []Event{
				held(1, "m", 1, 1, 2, 1, 10),
				held(2, "m", 1, 3, 4, 2, 12),
			},
			want: map[string]string{
				"overlap":         `key "m" (limit 1) had 2 holders at +3ns, when fence 2 was granted`,
				"linearizability": `key "m" (limit 1): not linearizable`,
			},
		},
		{
			name: "four holders of a semaphore of three",
			h: []Event{
				held(1, "s", 3, 1, 2, 1, 100),
				held(2, "s", 3, 1, 3, 2, 100),
				held(3, "s", 3, 1, 4, 3, 100),
				held(4, "s", 3, 50, 51, 4, 100),
			},
			want: map[string]string{
				"overlap":         `had 4 holders at +50ns, when fence 4 was granted`,
				"linearizability": "not linearizable",
			},
		},
		{
			name: "fence issued twice",
			h: []Event{
				held(1, "m", 1, 1, 2, 7, 10),
				held(2, "m", 1, 11, 12, 7, 20),
			},
			want: map[string]string{
				"fences":          `key "m": fence 7 granted twice`,
				"linearizability": "not linearizable",
			},
		},
		{
			name: "fence going back in time",
			h: []Event{
				held(1, "m", 1, 1, 2, 5, 10),
				held(2, "m", 1, 11, 12, 4, 20),
			},
			want: map[string]string{
				"fences":          `key "m": fence 4 was granted after fence 5 had returned`,
				"linearizability": "not linearizable",
			},
		},
		{
			name: "waiter overtaken",
			h: []Event{
				held(1, "m", 1, 1, 2, 3, 18),
				// g2 queues at 10; g3 calls at 15, after it, but is
				// granted first.
				queued(held(2, "m", 1, 5, 30, 5, 40), 10),
				queued(held(3, "m", 1, 15, 20, 4, 25), 16),
			},
			want: map[string]string{
				"fifo": `key "m": acquire overtook waiter p0/g2 (queued at +9ns, before the call at +14ns)`,
			},
		},
		{
			name: "TryAcquire barging",
			h: []Event{
				held(1, "m", 1, 1, 2, 3, 18),
				queued(held(2, "m", 1, 5, 30, 5, 40), 10),
				try(held(3, "m", 1, 19, 20, 4, 25)),
			},
			want: map[string]string{
				"fifo": `key "m": try barged ahead of waiter p0/g2`,
			},
		},
		{
			name: "release of a held lease reported not held",
			h: []Event{
				func() Event { e := held(1, "m", 1, 1, 2, 1, 10); e.Release = NotHeld; return e }(),
			},
			want: map[string]string{
				"linearizability": `release notheld by p0/g1 acquire "m" fence 1`,
			},
		},
		{
			name: "grant that must follow a release but has the lower fence",
			h: []Event{
				held(1, "m", 1, 1, 10, 2, 20),
				// Called before fence 2 returned, so real time allows
				// either order, but the slot was only free after 20.
				held(2, "m", 1, 5, 30, 1, 40),
			},
			want: map[string]string{
				"linearizability": "the longest linearizable prefix orders",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Check(tc.h, &Options{LinearizabilityTimeout: 10 * time.Second})
			if err == nil {
				t.Fatal("no violation reported")
			}
			got := make(map[string]string)
			for _, v := range Violations(err) {
				got[v.Check] = v.Error()
			}
			for check, sub := range tc.want {
				if !strings.Contains(got[check], sub) {
					t.Errorf("%s: want a report containing %q, got %q", check, sub, got[check])
				}
			}
			for check := range got {
				if _, ok := tc.want[check]; !ok {
					t.Errorf("unexpected %s report:\n%s", check, got[check])
				}
			}
			t.Logf("report:\n%v", err)
		})
	}
}

func TestContentionCheckWellFormed(t *testing.T) {
	t.Parallel()
	good := held(1, "m", 1, 1, 2, 1, 10)
	for _, tc := range []struct {
		name string
		edit func(*Event)
		want string
	}{
		{"return before call", func(e *Event) { e.Return = 0 }, "call/return out of order"},
		{"grant without fence", func(e *Event) { e.Fence = 0 }, "grant without a fence"},
		{"release without grant", func(e *Event) { e.OK, e.Fence = false, 0 }, "fence, loss, kill or release without a grant"},
		{"loss before call", func(e *Event) { e.Call, e.Lost = 2, 1 }, "lease lost before its call"},
		{"queued outside call", func(e *Event) { e.Queued = 5 }, "queued time on a TryAcquire or outside the call"},
		{"queued TryAcquire", func(e *Event) { e.Kind, e.Queued = TryAcquire, 2 }, "queued time on a TryAcquire or outside the call"},
		{"release before grant", func(e *Event) { e.ReleaseCall = 1 }, "release out of order"},
		{"unknown release result", func(e *Event) { e.Release = "maybe" }, "unknown release result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := good
			tc.edit(&e)
			err := Check([]Event{e}, nil)
			vs := Violations(err)
			if len(vs) != 1 || vs[0].Check != "history" || !strings.Contains(vs[0].Error(), tc.want) {
				t.Fatalf("want a history violation %q, got %v", tc.want, err)
			}
		})
	}
	err := CheckWellFormed([]Event{held(1, "m", 1, 1, 2, 1, 10), held(2, "m", 3, 11, 12, 2, 20)})
	if err == nil || !strings.Contains(err.Error(), "limit 3 differs from the key's 1") {
		t.Fatalf("want disagreeing limits reported, got %v", err)
	}
}

// TestContentionReportBounded checks that a long run of violations is counted in full
// but listed only in part.
func TestContentionReportBounded(t *testing.T) {
	t.Parallel()
	var h []Event
	for i := range 20 {
		h = append(h, held(i, "m", 1, 1, 2, uint64(i+1), 100))
	}
	vs := Violations(CheckOverlap(h))
	if len(vs) != 1 || vs[0].Count != 19 || len(vs[0].First) != maxReported {
		t.Fatalf("want 19 overlaps with %d listed, got %+v", maxReported, vs)
	}
}

func TestContentionRecorderRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	want := []Event{
		queued(held(1, "m", 1, 1, 12, 2, 20), 4),
		{Proc: 2, G: 3, Key: "k{x}|%", Limit: 3, Kind: TryAcquire, Call: 5, Return: 6},
		{Proc: 2, G: 4, Key: "k", Limit: 3, Kind: Acquire, Call: 7, Return: 9, Err: errTimeout},
	}
	for _, e := range want {
		r.Record(e)
	}
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(want) {
		t.Fatalf("want %d lines, got %d:\n%s", len(want), n, buf.String())
	}
	got, err := Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(r.Events(), want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	if _, err := Decode(strings.NewReader(`{"proc":1,"bogus":2}`)); err == nil {
		t.Fatal("unknown field accepted")
	}
}

func TestContentionNowMonotonic(t *testing.T) {
	t.Parallel()
	a := Now()
	time.Sleep(time.Millisecond)
	b := Now()
	if a <= 0 || b-a < int64(time.Millisecond) {
		t.Fatalf("Now: %d then %d", a, b)
	}
}

func TestContentionSummarize(t *testing.T) {
	t.Parallel()
	s := Summarize([]Event{
		queued(held(1, "m", 1, 1, 12, 2, 20), 4),
		{Proc: 1, Key: "m", Limit: 1, Kind: TryAcquire, Call: 5, Return: 6},
		{Proc: 2, Key: "n", Limit: 1, Kind: Acquire, Call: 7, Return: 9, Err: errTimeout},
	})
	want := Summary{Events: 3, Procs: 3, Keys: 2, Grants: 1, Queued: 1, TryFailed: 1, TimedOut: 1}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
}

// lost marks e's lease lost at t.
func lost(e Event, t int64) Event { e.Lost = t; return e }

func released(e Event, r ReleaseResult) Event { e.Release = r; return e }

// TestContentionCheckFaults: histories through faults, checked with
// Options.Faults. A hold ends where its lease was lost; a release that
// finds the lease gone is no violation; a lease lost before its grant
// returned was never held; waiters cut off while they waited may be
// overtaken. The same histories without the losses, or without the
// isolation, fail.
func TestContentionCheckFaults(t *testing.T) {
	t.Parallel()
	faults := &Options{Faults: true, LinearizabilityTimeout: 10 * time.Second}
	for _, tc := range []struct {
		name string
		h    []Event
		opts *Options
		// want are the checks that must fail, each with a substring of
		// its report; none for a valid history.
		want map[string]string
	}{
		{
			// g1's lease is lost at 10; the backend grants g2 at 12,
			// and g1's late release finds the lease gone.
			name: "a lost lease's hold ends where it was lost",
			h: []Event{
				released(lost(held(1, "m", 1, 1, 2, 1, 30), 10), NotHeld),
				held(2, "m", 1, 11, 12, 2, 20),
			},
			opts: faults,
		},
		{
			name: "the same without the loss overlaps",
			h: []Event{
				released(held(1, "m", 1, 1, 2, 1, 30), NotHeld),
				held(2, "m", 1, 11, 12, 2, 20),
			},
			opts: faults,
			want: map[string]string{
				"overlap":         `key "m" (limit 1) had 2 holders at +11ns, when fence 2 was granted`,
				"linearizability": "not linearizable",
			},
		},
		{
			// g1's reply came after its lease ran out (lost at 5,
			// returned at 15): it never held the slot, which g2 had.
			name: "a lease lost before its grant returned was never held",
			h: []Event{
				released(lost(held(1, "m", 1, 1, 15, 1, 16), 5), NotHeld),
				held(2, "m", 1, 6, 7, 2, 20),
			},
			opts: faults,
		},
		{
			// The release was on its way when the lease ran out: the
			// backend dropped the holder within the release's call.
			name: "a release that finds the lease gone",
			h: []Event{
				released(held(1, "s", 1, 1, 2, 1, 10), NotHeld),
				held(2, "s", 1, 3, 12, 2, 20),
			},
			opts: faults,
		},
		{
			name: "a release that finds the lease gone, without faults",
			h: []Event{
				released(held(1, "s", 1, 1, 2, 1, 10), NotHeld),
				held(2, "s", 1, 3, 12, 2, 20),
			},
			opts: &Options{LinearizabilityTimeout: 10 * time.Second},
			want: map[string]string{"linearizability": "not linearizable"},
		},
		{
			// Lost at 10, never released (the history ended): its slot
			// goes to g2 after.
			name: "a lost lease never released",
			h: []Event{
				func() Event {
					e := lost(held(1, "m", 1, 1, 2, 1, 0), 10)
					e.ReleaseCall, e.ReleaseReturn, e.Release = 0, 0, NotReleased
					return e
				}(),
				held(2, "m", 1, 11, 12, 2, 20),
			},
			opts: faults,
		},
		{
			// g2 queued at 10 but was cut off from 12 to 25: a grant it
			// could not hear of ran out, and g3 went first.
			name: "an isolated waiter overtaken",
			h: []Event{
				held(1, "m", 1, 1, 2, 3, 18),
				queued(held(2, "m", 1, 5, 30, 5, 40), 10),
				queued(held(3, "m", 1, 15, 20, 4, 25), 16),
			},
			opts: &Options{Faults: true, Isolations: []Isolation{{Proc: 0, From: 12, To: 25}}},
		},
		{
			name: "a waiter of another process isolated",
			h: []Event{
				held(1, "m", 1, 1, 2, 3, 18),
				queued(held(2, "m", 1, 5, 30, 5, 40), 10),
				queued(held(3, "m", 1, 15, 20, 4, 25), 16),
			},
			opts: &Options{Faults: true, Isolations: []Isolation{{Proc: 1, From: 12, To: 25}}},
			want: map[string]string{"fifo": "overtook waiter p0/g2"},
		},
		{
			name: "a loss does not hide fences out of order",
			h: []Event{
				lost(held(1, "m", 1, 1, 2, 5, 30), 10),
				held(2, "m", 1, 11, 12, 4, 20),
			},
			opts: faults,
			want: map[string]string{
				"fences":          "fence 4 was granted after fence 5 had returned",
				"linearizability": "not linearizable",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Check(tc.h, tc.opts)
			got := make(map[string]string)
			for _, v := range Violations(err) {
				got[v.Check] = v.Error()
			}
			for check, sub := range tc.want {
				if !strings.Contains(got[check], sub) {
					t.Errorf("%s: want a report containing %q, got %q", check, sub, got[check])
				}
			}
			for check := range got {
				if _, ok := tc.want[check]; !ok {
					t.Errorf("unexpected %s report:\n%s", check, got[check])
				}
			}
		})
	}
}

// TestContentionCheckPrompt: calls and releases that return too long after
// their deadlines, and failures that do not say what failed.
func TestContentionCheckPrompt(t *testing.T) {
	t.Parallel()
	ok := held(1, "m", 1, 10, 20, 1, 30)
	ok.Deadline, ok.ReleaseDeadline = 25, 40
	slowCall := Event{G: 2, Key: "m", Limit: 1, Kind: Acquire, Call: 10, Deadline: 50, Return: 161, Err: errTimeout}
	slowRelease := held(3, "m", 1, 200, 201, 2, 210)
	slowRelease.ReleaseDeadline, slowRelease.ReleaseReturn = 220, 400
	vague := Event{G: 4, Key: "m", Limit: 1, Kind: TryAcquire, Call: 10, Return: 20, Err: "EOF"}
	named := Event{G: 5, Key: "m", Limit: 1, Kind: TryAcquire, Call: 10, Return: 20, Err: `batonlock: acquire "m": EOF`}
	if err := CheckPrompt([]Event{ok, named}, 100); err != nil {
		t.Fatalf("prompt history reported:\n%v", err)
	}
	err := CheckPrompt([]Event{ok, slowCall, slowRelease, vague, named}, 100)
	vs := Violations(err)
	if len(vs) != 1 || vs[0].Count != 3 {
		t.Fatalf("want 3 prompt violations, got %v", err)
	}
	for _, want := range []string{"call returned 111ns after its deadline", "release returned 180ns after its deadline", `error does not name the call and key: "EOF"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in:\n%v", want, err)
		}
	}
}

// TestContentionKilledProcess: a killed process's history keeps its final
// events and, of the operations cut off, the last progress event: a hold
// ends at the kill, a release called ends there with its outcome unknown.
// The mutex it held is granted to another after the kill, which passes
// Check with Faults; the same history with the hold not cut off at the
// kill (Killed unset) fails overlap.
func TestContentionKilledProcess(t *testing.T) {
	t.Parallel()
	done := held(0, "m", 1, 1, 2, 1, 3)
	holding := Event{G: 1, Key: "m", Limit: 1, Kind: Acquire, Call: 4, Return: 5, OK: true, Fence: 2}
	releasing := Event{G: 2, Key: "s", Limit: 3, Kind: Acquire, Call: 4, Return: 6, OK: true, Fence: 3}
	releasingCalled := releasing
	releasingCalled.ReleaseCall, releasingCalled.ReleaseReturn, releasingCalled.Release = 8, 8, ReleaseFailed
	progress := []Event{done, holding, releasing, releasingCalled}
	h := KilledProcess([]Event{done}, progress, 10)
	want := []Event{done, holding, releasingCalled}
	want[1].Killed = 10
	want[2].ReleaseReturn = 10
	if !reflect.DeepEqual(h, want) {
		t.Fatalf("KilledProcess:\n got %+v\nwant %+v", h, want)
	}
	next := held(3, "m", 1, 6, 12, 4, 13)
	next.Proc = 1
	if err := Check(append(h, next), &Options{Faults: true}); err != nil {
		t.Fatal(err)
	}
	uncut := slices.Clone(h)
	uncut[1].Killed = 0
	if err := Check(append(uncut, next), &Options{Faults: true}); len(Violations(err)) == 0 || Violations(err)[0].Check != "overlap" {
		t.Fatalf("a hold not cut off at the kill: got %v, want an overlap", err)
	}
}

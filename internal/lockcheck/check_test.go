package lockcheck

import (
	"bytes"
	"reflect"
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
		{"release without grant", func(e *Event) { e.OK, e.Fence = false, 0 }, "fence or release without a grant"},
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

// Package lockcheck records histories of lock operations and checks them.
//
// A history is one Event per attempt to take a slot of a key: when the call
// started, when it was surely queued, when it returned, the fence it was
// granted, and when its release was called and returned. Processes on one
// machine record with Now (CLOCK_MONOTONIC), so their histories merge into
// one. The checkers then verify what Baton promises of every key:
//
//   - CheckOverlap: at no instant do more callers believe they hold a slot
//     of a key than its limit;
//   - CheckFences: fences are unique and follow real time: a grant that
//     returned before another was called has the smaller fence;
//   - CheckFIFO: a waiter that was surely queued before another caller
//     started is granted first; no TryAcquire barges ahead of it;
//   - CheckLinearizable: the grants and releases are linearizable as a
//     semaphore of limit slots with a fence counter (porcupine).
//
// Without faults, the checkers assume that no lease ended other than by its
// release: the workload's TTL must far exceed its hold times, and a release
// that reports the lease not held is itself a violation. A history recorded
// through faults (network cuts and partitions, paused servers) has leases
// that end while held: each such holder records when it stopped trusting
// its lease (Event.Lost), its hold ends there, and Check is told so
// (Options.Faults). CheckPrompt then verifies that no call hung past its
// deadline and that every failure says what failed. A process killed
// mid-run leaves its events and its progress (Workload.Progress), from
// which KilledProcess rebuilds its history: each hold it had ends at the
// kill (Event.Killed), checked with Options.Faults too.
package lockcheck

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
)

// Kind is how an operation asked for a slot.
type Kind string

const (
	// Acquire waits in the key's queue (batonlock.Locker.Acquire).
	Acquire Kind = "acquire"
	// TryAcquire makes one attempt (batonlock.Locker.TryAcquire).
	TryAcquire Kind = "try"
)

// ReleaseResult is what a release of a granted slot reported.
type ReleaseResult string

const (
	// NotReleased: the slot was not granted, or the history ended first.
	NotReleased ReleaseResult = ""
	// Released: the release gave back a held slot.
	Released ReleaseResult = "ok"
	// NotHeld: the release found the lease no longer held.
	NotHeld ReleaseResult = "notheld"
	// ReleaseFailed: the release returned an error; whether it took effect
	// is unknown.
	ReleaseFailed ReleaseResult = "error"
)

// Event is one operation of a history. Times are Now values; zero means
// "did not happen".
type Event struct {
	// Proc and G identify the process and goroutine that made the call.
	Proc int `json:"proc"`
	G    int `json:"g"`

	Key   string `json:"key"`
	Limit int    `json:"limit"`
	Kind  Kind   `json:"kind"`

	// Call is taken just before the call, Return just after it.
	Call int64 `json:"call"`
	// Deadline is when the call's context ends, if it has a deadline.
	Deadline int64 `json:"deadline,omitempty"`
	// Queued is taken in AcquireOpts.OnWait, which runs after the call that
	// queued the caller returned: from Queued on, the caller was surely in
	// the key's queue (or already granted). Zero if it never queued.
	Queued int64 `json:"queued,omitempty"`
	Return int64 `json:"ret"`

	// OK reports that a slot was granted, with fencing token Fence.
	OK    bool   `json:"ok"`
	Fence uint64 `json:"fence,omitempty"`
	// Err is "timeout" for an Acquire that gave up when its context ended,
	// else the error of a call that failed other than with "not acquired".
	Err string `json:"err,omitempty"`

	// Lost is when the holder stopped trusting its lease, if the lease
	// ended while held other than by the holder's release: the lease's
	// Until if it expired unconfirmed (its Context is cancelled then, by a
	// timer that a loaded machine may fire late; Lease.Err reads the
	// clock), or the moment the backend said it was gone, if earlier. The
	// holder's hold ends at Lost or ReleaseCall, whichever is first. Zero
	// if the lease was trusted until its release. Lost may come before
	// Return: a grant whose reply arrived after the lease's Until (held up
	// by a partition) is a lease lost on arrival, never trusted.
	Lost int64 `json:"lost,omitempty"`
	// Killed is when the holder's process had been sent SIGKILL (its
	// killer read Now once kill(2) returned), for a hold it still had
	// when killed; the hold ends there. Zero for a holder never killed.
	// A killed process's event is assembled by KilledProcess.
	Killed int64 `json:"killed,omitempty"`

	// ReleaseCall and ReleaseReturn bracket the release of a granted slot.
	// ReleaseDeadline is when the release's context ends, if it has a
	// deadline.
	ReleaseDeadline int64         `json:"relDeadline,omitempty"`
	ReleaseCall     int64         `json:"relCall,omitempty"`
	ReleaseReturn   int64         `json:"relRet,omitempty"`
	Release         ReleaseResult `json:"rel,omitempty"`
}

// Recorder collects events from many goroutines and, if it has a writer,
// writes each as one JSON line. It is safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	w      *bufio.Writer
	enc    *json.Encoder
	synced bool
	err    error
	events []Event
}

// NewSyncedRecorder is NewRecorder writing each event at once, one write
// per line, so that a process killed mid-run leaves every event it
// recorded before (bar, at worst, a last line cut short).
func NewSyncedRecorder(w io.Writer) *Recorder {
	r := NewRecorder(w)
	r.synced = true
	return r
}

// NewRecorder returns a Recorder writing to w; nil w keeps events only in
// memory.
func NewRecorder(w io.Writer) *Recorder {
	r := &Recorder{}
	if w != nil {
		r.w = bufio.NewWriter(w)
		r.enc = json.NewEncoder(r.w)
	}
	return r
}

// Record adds e to the history.
func (r *Recorder) Record(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	if r.enc != nil && r.err == nil {
		r.err = r.enc.Encode(e)
		if r.synced && r.err == nil {
			r.err = r.w.Flush()
		}
	}
}

// Events returns a copy of the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Flush writes buffered lines and returns the first write error.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.w != nil && r.err == nil {
		r.err = r.w.Flush()
	}
	return r.err
}

// Decode reads JSON lines written by a Recorder.
func Decode(rd io.Reader) ([]Event, error) {
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	var out []Event
	for {
		var e Event
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("lockcheck: event %d: %w", len(out)+1, err)
		}
		out = append(out, e)
	}
}

// ReadFiles decodes and concatenates the histories in paths.
func ReadFiles(paths ...string) ([]Event, error) {
	var all []Event
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("lockcheck: %w", err)
		}
		h, err := Decode(f)
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("lockcheck: %s: %w", p, err)
		}
		all = append(all, h...)
	}
	return all, nil
}

// KilledProcess returns the history of a process that was sent SIGKILL at
// signalled: its final events (each written once its operation was over)
// and, for each operation with progress events (Workload.Progress) but no
// final event, its last progress event, cut off at the kill: a hold it
// had is marked Killed at signalled, and a release it had called ended
// there with its outcome unknown (ReleaseFailed). Operations are matched
// by goroutine and call time.
func KilledProcess(final, progress []Event, signalled int64) []Event {
	type op struct {
		g    int
		call int64
	}
	done := make(map[op]bool, len(final))
	for _, e := range final {
		done[op{e.G, e.Call}] = true
	}
	last := make(map[op]int)
	var order []op
	for i, e := range progress {
		o := op{e.G, e.Call}
		if done[o] {
			continue
		}
		if _, ok := last[o]; !ok {
			order = append(order, o)
		}
		last[o] = i
	}
	out := slices.Clone(final)
	for _, o := range order {
		e := progress[last[o]]
		if e.ReleaseCall != 0 {
			e.Release, e.ReleaseReturn = ReleaseFailed, max(signalled, e.ReleaseCall)
		} else if e.OK {
			e.Killed = signalled
		}
		out = append(out, e)
	}
	return out
}

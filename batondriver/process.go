package batondriver

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// ProcessDriver is the registry of live worker processes: the processes
// working a backend's queues, each kept listed by its own beats. A started
// client beats every so often (ProcessBeat), each beat renewing its record
// for TTL; a record that no beat renews within its TTL has expired, and a
// client that stops removes its own (ProcessRemove). So ProcessList shows
// the processes working now, and a process that crashed or was cut off for
// longer than its TTL drops out on its own.
//
// The registry is one per backend (on Redis, per key prefix), not per
// queue: it lives apart from every queue, and no job transition reads or
// writes it. Expiry is decided by the backend's clock, never the caller's:
// a record is live while the backend's time is before its ExpiresAt.
type ProcessDriver interface {
	// ProcessBeat records a process, or renews its record: every field of
	// ProcessRecord is replaced, SeenAt becomes the backend's now and
	// ExpiresAt now + TTL. StartedAt is kept from a live record of the same
	// ID; a record that is new, or had expired (the process was silent
	// longer than its TTL), starts at now, and the result says so. A beat
	// may drop a bounded number of other expired records as it goes.
	ProcessBeat(ctx context.Context, p *ProcessBeatParams) (*ProcessBeatResult, error)

	// ProcessRemove removes a process's record at once, live or expired. A
	// record that does not exist is no error: removal is idempotent.
	ProcessRemove(ctx context.Context, p *ProcessRemoveParams) error

	// ProcessList returns every live record, sorted by Host, then PID, then
	// ID; none is an empty list. It drops the expired records it meets (all
	// of them) in the same step. Its cost is linear in the number of
	// records, live and expired; it never scans the backend's keyspace.
	ProcessList(ctx context.Context) (*ProcessListResult, error)
}

// Limits of a process record (ProcessBeat refuses bigger ones).
const (
	MaxProcessIDLen      = 128
	MaxProcessNameLen    = 128
	MaxProcessHostLen    = 255
	MaxProcessVersionLen = 64
	MaxProcessQueues     = 1000
)

// ProcessRecord is what a process says of itself at each beat.
type ProcessRecord struct {
	// ID names the record: 1 to MaxProcessIDLen bytes of valid UTF-8,
	// unique among the processes sharing the backend (Baton's clients make
	// a random one at each Start).
	ID string
	// Name is a label the application chose (Config.ProcessName), at most
	// MaxProcessNameLen bytes of valid UTF-8; "" if none.
	Name string
	// Host is the machine's host name, at most MaxProcessHostLen bytes of
	// valid UTF-8, and PID the process's ID on it (not negative).
	Host string
	PID  int
	// Version is the version of Baton the process runs, at most
	// MaxProcessVersionLen bytes of valid UTF-8; "" if unknown.
	Version string
	// Queues are the queues the process works, in its order, each with its
	// weight and cap, at most MaxProcessQueues; each a name CheckQueue
	// takes, with a weight and a cap not negative. With StrictPriority the
	// order is the priority and the weights do not count.
	Queues         []ProcessQueue
	StrictPriority bool
	// Concurrency is how many jobs the process runs at once, and Busy how
	// many of its workers were in use at the beat; neither negative.
	Concurrency int
	Busy        int
	// Stopping reports that the process has begun to stop: it fetches no
	// more jobs and waits for the running ones.
	Stopping bool
}

// ProcessQueue is one queue a process works, with its weight, and the
// most of its workers that run the queue's jobs at once (0: no cap but its
// Concurrency).
type ProcessQueue struct {
	Name       string
	Weight     int
	MaxWorkers int
}

// ProcessBeatParams are the parameters of ProcessBeat.
type ProcessBeatParams struct {
	ProcessRecord
	// TTL is how long the record lives unless renewed: at least 1ms.
	TTL time.Duration
}

// ProcessBeatResult is the result of ProcessBeat.
type ProcessBeatResult struct {
	// Created reports that no live record of the ID was there: the beat
	// made a new one, starting now.
	Created bool
	// Now is the backend's time of the beat.
	Now time.Time
}

// ProcessRemoveParams are the parameters of ProcessRemove.
type ProcessRemoveParams struct {
	// ID names the record, as in ProcessRecord.
	ID string
}

// Process is one live record as ProcessList reports it.
type Process struct {
	ProcessRecord
	// StartedAt is the backend's time of the first beat of the record
	// (since it last expired or was removed), SeenAt that of the latest,
	// and ExpiresAt when the record expires unless renewed: SeenAt + TTL.
	StartedAt time.Time
	SeenAt    time.Time
	ExpiresAt time.Time
}

// ProcessListResult is the result of ProcessList.
type ProcessListResult struct {
	// Processes are the live records, sorted by Host, then PID, then ID.
	Processes []*Process
	// Now is the backend's time of the listing: every record listed
	// expires after it.
	Now time.Time
}

// CheckProcessBeat checks what every backend requires of p (see
// ProcessRecord and ProcessBeatParams). The error wraps ErrBadParams and
// names the field that is wrong.
func CheckProcessBeat(p *ProcessBeatParams) error {
	if err := checkProcessID(p.ID); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: process %q: %s", ErrBadParams, p.ID, fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		field, value string
		max          int
	}{
		{"Name", p.Name, MaxProcessNameLen},
		{"Host", p.Host, MaxProcessHostLen},
		{"Version", p.Version, MaxProcessVersionLen},
	} {
		if len(f.value) > f.max {
			return bad("%s has %d bytes, at most %d", f.field, len(f.value), f.max)
		}
		if !utf8.ValidString(f.value) {
			return bad("%s is not valid UTF-8", f.field)
		}
	}
	switch {
	case p.PID < 0:
		return bad("PID %d is negative", p.PID)
	case p.Concurrency < 0:
		return bad("Concurrency %d is negative", p.Concurrency)
	case p.Busy < 0:
		return bad("Busy %d is negative", p.Busy)
	case len(p.Queues) > MaxProcessQueues:
		return bad("%d queues, at most %d", len(p.Queues), MaxProcessQueues)
	case p.TTL < time.Millisecond:
		return bad("TTL %v is under 1ms", p.TTL)
	}
	for i, q := range p.Queues {
		if err := CheckQueue(q.Name); err != nil {
			return fmt.Errorf("process %q: Queues[%d]: %w", p.ID, i, err)
		}
		if q.Weight < 0 {
			return bad("Queues[%d] (%q) has a negative weight %d", i, q.Name, q.Weight)
		}
		if q.MaxWorkers < 0 {
			return bad("Queues[%d] (%q) has a negative MaxWorkers %d", i, q.Name, q.MaxWorkers)
		}
	}
	return nil
}

// CheckProcessRemove checks what every backend requires of p: an ID as in
// ProcessRecord. The error wraps ErrBadParams.
func CheckProcessRemove(p *ProcessRemoveParams) error { return checkProcessID(p.ID) }

// checkProcessID refuses an ID that ProcessRecord does not allow.
func checkProcessID(id string) error {
	switch {
	case id == "" || len(id) > MaxProcessIDLen:
		return fmt.Errorf("%w: process ID must have 1 to %d bytes, not %d", ErrBadParams, MaxProcessIDLen, len(id))
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: process ID %q is not valid UTF-8", ErrBadParams, id)
	}
	return nil
}

// SortProcesses sorts ps in ProcessList's order: by Host, then PID, then
// ID.
func SortProcesses(ps []*Process) {
	slices.SortFunc(ps, func(a, b *Process) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), strings.Compare(a.ID, b.ID))
	})
}

package batondriver

import (
	"fmt"
	"time"
)

// A queue's registry of recurring schedules (JobDriver.QueueScheduleRegister
// and QueueScheduleList). The schedules themselves live in the processes
// that run them; what the backend keeps is what they registered, so that
// tools can list them, and the last tick each inserted (JobInsertOnce). A
// schedule is registered in the queue its jobs go to, the queue that keeps
// its ticks.

// Limits of a schedule's registration.
const (
	MaxScheduleNameLen = 128
	MaxScheduleSpecLen = 256
	MaxScheduleKindLen = 128
)

// QueueScheduleParams are the parameters of QueueScheduleRegister.
type QueueScheduleParams struct {
	Queue string
	// Name is the schedule's name, as in JobInsertOnce: 1 to
	// MaxScheduleNameLen bytes.
	Name string
	// Spec says when it fires, for people and tools: "every 15m0s", or a
	// cron spec. At most MaxScheduleSpecLen bytes; "" if unknown.
	Spec string
	// Kind is the kind of the jobs it inserts, at most MaxScheduleKindLen
	// bytes; "" if unknown.
	Kind string
	// TTL is how long the registration lasts unless registered again; at
	// least 1ms.
	TTL time.Duration
}

// QueueSchedule is one registered schedule of a queue.
type QueueSchedule struct {
	Name string
	Spec string
	Kind string
	// LastTick is the last tick inserted under Name in the queue (by
	// JobInsert with Once), or zero if none was.
	LastTick time.Time
	// RegisteredAt is the backend's time of the first registration since
	// the schedule was last dropped, SeenAt that of the latest one, and
	// ExpiresAt when it is dropped unless registered again (SeenAt + TTL).
	RegisteredAt time.Time
	SeenAt       time.Time
	ExpiresAt    time.Time
}

// QueueScheduleListResult is the result of QueueScheduleList.
type QueueScheduleListResult struct {
	Queue string
	// Schedules are the queue's unexpired registrations, by name.
	Schedules []*QueueSchedule
}

// CheckSchedule validates the parameters of QueueScheduleRegister but the
// queue's name, whose rules are the backend's.
func CheckSchedule(p *QueueScheduleParams) error {
	switch {
	case p.Name == "" || len(p.Name) > MaxScheduleNameLen:
		return fmt.Errorf("%w: schedule name must have 1 to %d bytes, not %d", ErrBadParams, MaxScheduleNameLen, len(p.Name))
	case len(p.Spec) > MaxScheduleSpecLen:
		return fmt.Errorf("%w: schedule spec must have at most %d bytes, not %d", ErrBadParams, MaxScheduleSpecLen, len(p.Spec))
	case len(p.Kind) > MaxScheduleKindLen:
		return fmt.Errorf("%w: schedule kind must have at most %d bytes, not %d", ErrBadParams, MaxScheduleKindLen, len(p.Kind))
	case p.TTL < time.Millisecond:
		return fmt.Errorf("%w: schedule TTL %v must be at least 1ms", ErrBadParams, p.TTL)
	}
	return nil
}

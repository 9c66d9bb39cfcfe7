package baton

import (
	"errors"
	"fmt"
	"time"
)

// ErrUnknownKind is wrapped by Insert for a kind no worker is registered
// for, when Config.AllowUnknownKinds is false.
var ErrUnknownKind = errors.New("baton: unknown job kind")

// ErrLeaseLost is the cause of a handler's context when its job's lease was
// lost: the heartbeat could not renew it in time, or the backend took the job
// back. Another worker may run the job; the handler should stop.
var ErrLeaseLost = errors.New("baton: job lease lost")

// ErrStopping is the cause of a handler's context when Stop's context ended
// before the handler returned. The job goes back to its queue without
// counting the attempt.
var ErrStopping = errors.New("baton: client stopping")

// ErrJobCancelled is the cause of a handler's context when an admin
// cancelled its job while it ran (Client.JobCancel): the worker learns of
// it at its next heartbeat. The handler should stop and return; whatever
// it returns but nil ends the job cancelled, with no more attempts (nil
// means the work got done: the job completes).
var ErrJobCancelled = errors.New("baton: job cancel requested")

// PanicError is the error of an attempt whose handler, or a worker
// middleware, panicked. The worker recovers the panic, and the attempt
// fails with a *PanicError as with any other error: the job is retried
// with backoff, and is dead once its attempts are used up. The worker
// middleware outside the panic, Config.OnJobEnd (JobEvent.Err) and
// batontest.WorkResult.Err see it; find it with errors.As, through any
// wrapping. The error the job records is its text followed by Stack; the
// worker logs both.
//
// A panic's value steers nothing: panic(JobSnooze(d)) is a failure, not a
// snooze, and a PanicError does not unwrap to Value.
type PanicError struct {
	// Value is what was passed to panic (a runtime.Error for a fault such
	// as a nil dereference).
	Value any
	// Stack is the stack of the goroutine that panicked, from the panic
	// up, as runtime/debug.Stack formats it where the worker recovered it.
	Stack []byte
}

// Error says what panicked: "panic: " and Value, without the stack.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// JobSnooze returns an error that makes the job run again after d without
// counting the attempt: for work that is not ready yet.
func JobSnooze(d time.Duration) error { return &snoozeError{d: d} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("baton: snoozed for %v", e.d) }

// JobCancel returns an error that ends the job with no more attempts; it
// goes to the dead set as cancelled, with err recorded.
func JobCancel(err error) error { return &cancelError{err: err} }

type cancelError struct{ err error }

func (e *cancelError) Error() string {
	if e.err == nil {
		return "baton: job cancelled"
	}
	return "baton: job cancelled: " + e.err.Error()
}

func (e *cancelError) Unwrap() error { return e.err }

// JobAgain returns an error that ends the job's run successfully and queues
// a new run of the same job at once, in the same atomic step that frees its
// concurrency slot: no twin slips in between and the follow-up cannot be
// lost (docs/concurrency.md). The new run has its attempts reset; Runs
// counts it.
func JobAgain() error { return &againError{} }

// JobAgainIn is JobAgain with the new run scheduled d from now; the slot is
// free meanwhile.
func JobAgainIn(d time.Duration) error { return &againError{d: d} }

type againError struct{ d time.Duration }

func (e *againError) Error() string { return fmt.Sprintf("baton: run again in %v", e.d) }

// OutcomeOf is what a worker records for an attempt whose handler returned
// err, and after how long the job runs again: JobOutcomeCompleted for nil;
// JobOutcomeSnooze with d for JobSnooze(d), JobOutcomeAgain with d for
// JobAgain (0) and JobAgainIn(d), JobOutcomeCancel for JobCancel — each
// found with errors.As, so wrapped too, and in that order; a negative d
// counts as 0. Any other error is JobOutcomeRetry with a delay of 0 here:
// the worker waits its kind's Backoff, and the backend makes the job dead
// instead once its attempts are used up. Tests use it (package batontest)
// to tell what a handler asked for without running a client.
//
// It sees the error alone. A running client also gives a job back without
// counting the attempt when its Stop cuts the handler short (ErrStopping),
// records nothing when the lease was lost (ErrLeaseLost), records a cancel
// for an error returned after an admin cancelled the job
// (ErrJobCancelled), and makes dead at once a job whose args its kind
// cannot decode.
func OutcomeOf(err error) (JobOutcome, time.Duration) {
	var (
		snooze *snoozeError
		again  *againError
		cancel *cancelError
		decode *undecodableError
	)
	switch {
	case err == nil:
		return JobOutcomeCompleted, 0
	case errors.As(err, &snooze):
		return JobOutcomeSnooze, max(snooze.d, 0)
	case errors.As(err, &again):
		return JobOutcomeAgain, max(again.d, 0)
	case errors.As(err, &cancel):
		return JobOutcomeCancel, 0
	case errors.As(err, &decode):
		return JobOutcomeDead, 0
	}
	return JobOutcomeRetry, 0
}

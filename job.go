package baton

import (
	"slices"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// JobArgs are the arguments of a kind of job. Kind names the kind: it is
// stored with every job and picks the worker that runs it, so it must stay
// the same for as long as jobs of the kind may be queued. The args are
// stored as JSON.
type JobArgs interface {
	Kind() string
}

// JobRow is a job as the backend stores it: its state, attempts, errors and
// raw arguments. Job[T] embeds it.
type JobRow = batondriver.JobRow

// JobState is where a job is in its life; docs/job-states.md draws them.
type JobState = batondriver.JobState

// The states of a job.
const (
	JobStateScheduled = batondriver.JobStateScheduled
	JobStateParked    = batondriver.JobStateParked
	JobStateAvailable = batondriver.JobStateAvailable
	JobStateRunning   = batondriver.JobStateRunning
	JobStateCompleted = batondriver.JobStateCompleted
	JobStateCancelled = batondriver.JobStateCancelled
	JobStateDead      = batondriver.JobStateDead
	JobStateDropped   = batondriver.JobStateDropped
)

// JobStates are every state, in the order of a job's life, as
// docs/job-states.md draws them: for code that goes through them all
// (Client.JobList takes one state at a time). It is a copy of
// batondriver.JobStates: changing it changes nothing in Baton.
var JobStates = slices.Clone(batondriver.JobStates)

// AttemptError is the error of one failed attempt.
type AttemptError = batondriver.AttemptError

// Job is a job with its decoded arguments, as a worker receives it.
type Job[T JobArgs] struct {
	*JobRow
	Args T
}

// JobEvent describes one finished attempt, for Config.OnJobEnd.
type JobEvent struct {
	// ID, Queue and Kind name the job; Key is its concurrency key ("" for
	// none) and Fence the fencing token of this attempt (0 without a key).
	ID    string
	Queue string
	Kind  string
	Key   string
	Fence int64
	// Outcome is what the attempt asked the backend to record; "lost" if
	// its lease was lost and nothing is recorded.
	Outcome JobOutcome
	// Attempt counts this attempt (1 for the first); a snoozed attempt
	// is not counted, so the next one has the same number.
	Attempt int
	// Wait is from when the job became runnable (its RunAt) to its start;
	// Run is how long its handler ran.
	Wait time.Duration
	Run  time.Duration
	// Err is the handler's error, as the worker middleware passed it on;
	// a *PanicError if the handler or a middleware panicked. nil on
	// success.
	Err error
}

// JobOutcome is what became of an attempt.
type JobOutcome = batondriver.JobOutcome

// The outcomes of an attempt, as JobEvent reports them.
const (
	JobOutcomeCompleted = batondriver.JobOutcomeCompleted
	JobOutcomeRetry     = batondriver.JobOutcomeRetry
	JobOutcomeSnooze    = batondriver.JobOutcomeSnooze
	JobOutcomeCancel    = batondriver.JobOutcomeCancel
	JobOutcomeDead      = batondriver.JobOutcomeDead
	JobOutcomeAgain     = batondriver.JobOutcomeAgain
	// JobOutcomeLost: the lease was lost; the backend takes the job back.
	JobOutcomeLost JobOutcome = "lost"
)

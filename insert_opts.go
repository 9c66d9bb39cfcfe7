package baton

import (
	"time"
)

// InsertOpts are the options of one insert. nil means the defaults of the
// job's kind, then of the client.
type InsertOpts struct {
	// Queue is where the job goes. Default: the kind's WorkerOpts.Queue,
	// else "default". A name is 1 to 128 bytes of A-Z a-z 0-9 _ . : -;
	// another fails the insert with an error wrapping
	// batondriver.ErrBadParams.
	Queue string
	// Priority orders the jobs of a queue: 0 runs first, 9 last. Default 0,
	// the most urgent: give less urgent jobs a higher number.
	Priority int
	// RunAt schedules the job; zero means now. Delay is the same, relative
	// to the insert and counted on the backend's clock (the caller's may be
	// off), and wins over RunAt when both are set; a negative Delay fails
	// the insert.
	RunAt time.Time
	Delay time.Duration
	// MaxAttempts bounds the attempts. Default: the kind's WorkerOpts, else
	// Config.MaxAttempts (25).
	MaxAttempts int
	// Tags label the job for people and tools; at most 16 of 128 bytes.
	Tags []string
	// Metadata is JSON stored with the job (an object by convention); an
	// insert with invalid JSON fails.
	Metadata []byte
	// Concurrency and Unique replace the kind's WorkerOpts.Concurrency and
	// WorkerOpts.Unique for this job.
	Concurrency *ConcurrencyOpts
	Unique      *UniqueOpts
}

// InsertManyParams is one job of InsertMany.
type InsertManyParams struct {
	Args JobArgs
	Opts *InsertOpts
}

// InsertResult describes an inserted job.
type InsertResult struct {
	// Job is the stored job — or, for a uniqueness conflict, its twin (a
	// twin gone since, whose UniquePeriod claim lives on, is a row of its
	// ID and Queue alone); nil for an insert refused with ErrKeyBusy.
	Job *JobRow
	// Status says whether the job was stored or resolved to a twin.
	Status JobInsertStatus
}

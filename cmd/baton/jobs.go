package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// maxPage is the most jobs one listing shows, the backend's page limit.
const maxPage = 1000

// jobOut is a job as the commands print it. The lease, the running
// attempt's secret, is left out: with it anyone could finish the job.
type jobOut struct {
	ID          string               `json:"id"`
	Queue       string               `json:"queue"`
	Kind        string               `json:"kind"`
	State       baton.JobState       `json:"state"`
	Priority    int                  `json:"priority"`
	Attempt     int                  `json:"attempt"`
	MaxAttempts int                  `json:"max_attempts"`
	Args        json.RawMessage      `json:"args"`
	Tags        []string             `json:"tags,omitempty"`
	Metadata    json.RawMessage      `json:"metadata,omitempty"`
	CreatedAt   *time.Time           `json:"created_at,omitempty"`
	RunAt       *time.Time           `json:"run_at,omitempty"`
	AttemptedAt *time.Time           `json:"attempted_at,omitempty"`
	FinishedAt  *time.Time           `json:"finished_at,omitempty"`
	LeaseUntil  *time.Time           `json:"lease_until,omitempty"`
	Errors      []baton.AttemptError `json:"errors,omitempty"`

	// The job's concurrency key and its settings, and its uniqueness;
	// omitted when not set.
	Key         string            `json:"key,omitempty"`
	Limit       int               `json:"limit,omitempty"` // the key's default limit the job carries
	OnBusy      baton.OnBusy      `json:"on_busy,omitempty"`
	Fence       int64             `json:"fence,omitempty"`
	Unique      string            `json:"unique,omitempty"`
	UniqueScope baton.UniqueScope `json:"unique_scope,omitempty"`
	Runs        int               `json:"runs,omitempty"` // runs started by JobAgain
	ParkedAt    *time.Time        `json:"parked_at,omitempty"`
	// CancelRequestedAt is when an admin asked the running job to stop
	// (baton jobs cancel); omitted if never.
	CancelRequestedAt *time.Time `json:"cancel_requested_at,omitempty"`
	// Output is what the latest run that completed recorded
	// (baton.RecordOutput); omitted if none did.
	Output json.RawMessage `json:"output,omitempty"`
}

func toJobOut(r *baton.JobRow) *jobOut {
	return &jobOut{
		ID: r.ID, Queue: r.Queue, Kind: r.Kind, State: r.State, Priority: r.Priority,
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts,
		Args: rawJSON(r.Args), Tags: r.Tags, Metadata: rawJSON(r.Metadata),
		CreatedAt: timePtr(r.CreatedAt), RunAt: timePtr(r.RunAt), AttemptedAt: timePtr(r.AttemptedAt),
		FinishedAt: timePtr(r.FinishedAt), LeaseUntil: timePtr(r.LeaseUntil), Errors: r.Errors,
		Key: r.Key, Limit: r.Limit, OnBusy: r.OnBusy, Fence: r.Fence,
		Unique: r.Unique, UniqueScope: r.UniqueScope, Runs: r.Runs, ParkedAt: timePtr(r.ParkedAt),
		CancelRequestedAt: timePtr(r.CancelRequestedAt), Output: rawJSON(r.Output),
	}
}

// rawJSON is b as JSON: itself if valid, else as a string, so that one odd
// job cannot break a listing.
func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

func newJobsCmd(a *app) *cobra.Command {
	return group("jobs", "List, show, retry, cancel and delete jobs",
		a.jobsListCmd(), a.jobsShowCmd(), a.jobsRetryCmd(), a.jobsCancelCmd(), a.jobsDeleteCmd())
}

// pageFlags are --limit and --offset.
type pageFlags struct{ limit, offset int }

func (p *pageFlags) add(cmd *cobra.Command, noun string) {
	p.limit = 20
	cmd.Flags().Var(&intFlag{v: &p.limit, min: 1, max: maxPage}, "limit", "show at most `N` "+noun+" (1..1000)")
	cmd.Flags().Var(&intFlag{v: &p.offset, min: 0, max: 1 << 30}, "offset", "skip the first `N` "+noun)
}

// queueFlag is -q/--queue; "" means every queue.
func queueFlag(cmd *cobra.Command, q *string) {
	cmd.Flags().StringVarP(q, "queue", "q", "", "only this `queue` (default: every queue)")
}

func (a *app) jobsListCmd() *cobra.Command {
	var queue, state, key string
	var page pageFlags
	cmd := &cobra.Command{
		Use:   "list [-q QUEUE] [--state STATE | --key KEY] [--limit N] [--offset N]",
		Short: "List jobs in one state, oldest first",
		Long: `List the jobs in one state, oldest first: available ones in the order they
will be fetched (priority, then when they became available), scheduled ones by when
they are to run, running ones by when they started, parked ones by when they were
parked, the others by when they finished. Without -q the jobs of every queue are
merged (available ones by priority, then run time); then --offset plus --limit may
not exceed 1000.

States: ` + statesList() + `. Parked jobs
wait for a slot of their concurrency key (see 'baton keys list'); dropped ones found
their key busy and were dropped by their OnBusy policy.

With --key (and -q), the jobs parked for that concurrency key alone, in the order
they will run as its slots free: the next to run first. 'baton key show' shows the
key's holders.`,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := parseState(state); err != nil {
				return err
			}
			if key == "" {
				return nil
			}
			if queue == "" {
				return usageErr("--key needs -q QUEUE: a concurrency key belongs to one queue")
			}
			if cmd.Flags().Changed("state") && state != string(baton.JobStateParked) {
				return usageErr("--key lists parked jobs only, not --state %s ('baton key show' lists the holders)", state)
			}
			if batondriver.CheckKey(key) != nil {
				return usageErr("bad --key: it must have 1 to %d bytes, not %d", batondriver.MaxKeyLen, len(key))
			}
			return nil
		},
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			if key != "" {
				if err := requireQueue(ctx, b, queue); err != nil {
					return err
				}
				jobs, total, err := b.client.JobList(ctx, queue, baton.JobStateParked,
					&baton.JobListOpts{Limit: page.limit, Offset: page.offset, Key: key})
				if err != nil {
					return err
				}
				return a.emitJobs(jobs, total, page, false)
			}
			st, _ := parseState(state) // checked before connecting
			queues, err := queuesOf(ctx, b, queue)
			if err != nil {
				return err
			}
			jobs, total, err := listJobs(ctx, b, queues, []baton.JobState{st}, page)
			if err != nil {
				return err
			}
			return a.emitJobs(jobs, total, page, len(queues) != 1)
		}),
	}
	queueFlag(cmd, &queue)
	cmd.Flags().StringVar(&state, "state", string(baton.JobStateAvailable), "the `state` to list")
	cmd.Flags().StringVar(&key, "key", "", "only the jobs parked for concurrency `KEY`, in the order they will run (needs -q)")
	page.add(cmd, "jobs")
	return cmd
}

// statesList names the states `jobs list --state` accepts: every state,
// in the order of a job's life (baton.JobStates).
func statesList() string {
	s := make([]string, len(baton.JobStates))
	for i, st := range baton.JobStates {
		s[i] = string(st)
	}
	return strings.Join(s, ", ")
}

func parseState(s string) (baton.JobState, error) {
	for _, st := range baton.JobStates {
		if string(st) == s {
			return st, nil
		}
	}
	return "", usageErr("unknown --state %q: want one of %s", s, statesList())
}

// listJobs lists the jobs of queues in states, oldest first, a page at a
// time, and how many there are in all. With one queue and state it is one
// backend call; otherwise it reads the first offset+limit of each and
// merges them.
func listJobs(ctx context.Context, b *backend, queues []string, states []baton.JobState, page pageFlags) ([]*baton.JobRow, int, error) {
	if len(queues)*len(states) == 1 {
		return b.client.JobList(ctx, queues[0], states[0], &baton.JobListOpts{Limit: page.limit, Offset: page.offset})
	}
	if page.offset+page.limit > maxPage {
		return nil, 0, usageErr("--offset %d plus --limit %d exceeds %d over several queues or states: page one queue and state with baton jobs list -q QUEUE --state STATE",
			page.offset, page.limit, maxPage)
	}
	var all []*baton.JobRow
	total := 0
	for _, q := range queues {
		for _, st := range states {
			jobs, n, err := b.client.JobList(ctx, q, st, &baton.JobListOpts{Limit: page.offset + page.limit})
			if err != nil {
				return nil, 0, err
			}
			all = append(all, jobs...)
			total += n
		}
	}
	slices.SortStableFunc(all, func(x, y *baton.JobRow) int {
		return cmp.Or(listPriority(x)-listPriority(y), orderTime(x).Compare(orderTime(y)), cmp.Compare(x.ID, y.ID))
	})
	if page.offset >= len(all) {
		return nil, total, nil
	}
	return all[page.offset:min(len(all), page.offset+page.limit)], total, nil
}

// listPriority is what jobs of several queues are merged by first: the
// priority of available jobs, which each queue lists in fetch order.
func listPriority(r *baton.JobRow) int {
	if r.State == baton.JobStateAvailable {
		return r.Priority
	}
	return 0
}

// orderTime is the time jobs of several queues are merged by next: the
// backend's order for its state, or for available jobs the time they may
// run from.
func orderTime(r *baton.JobRow) time.Time {
	switch r.State {
	case baton.JobStateAvailable, baton.JobStateScheduled:
		return r.RunAt
	case baton.JobStateRunning:
		return r.AttemptedAt
	case baton.JobStateParked:
		return r.ParkedAt
	}
	return r.FinishedAt
}

// more is the hint at the foot of a page that ends at shown of total.
func more(shown, total int) string {
	if shown < total {
		return fmt.Sprintf("; --offset %d for more", shown)
	}
	return ""
}

// jobListOut is a page of jobs as --json prints it.
type jobListOut struct {
	Total  int       `json:"total"`
	Offset int       `json:"offset"`
	Jobs   []*jobOut `json:"jobs"`
}

// emitJobs prints a page of jobs; the QUEUE column only when several
// queues were listed.
func (a *app) emitJobs(jobs []*baton.JobRow, total int, page pageFlags, manyQueues bool) error {
	out := jobListOut{Total: total, Offset: page.offset, Jobs: make([]*jobOut, len(jobs))}
	for i, j := range jobs {
		out.Jobs[i] = toJobOut(j)
	}
	now := time.Now()
	return a.emit(out, func(w io.Writer) {
		if len(jobs) == 0 {
			fmt.Fprintf(w, "no jobs (%d in all)\n", total)
			return
		}
		head := []any{"ID", "KIND", "STATE", "PRIO", "ATTEMPT", "WHEN", "ARGS", "LAST ERROR"}
		if manyQueues {
			head = slices.Insert(head, 1, any("QUEUE"))
		}
		row(w, head...)
		for _, j := range jobs {
			lastErr := "-"
			if n := len(j.Errors); n > 0 {
				lastErr = clip(j.Errors[n-1].Error, 40)
			}
			cells := []any{j.ID, j.Kind, j.State, j.Priority, fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts),
				when(orderTime(j), now), clip(string(j.Args), 40), lastErr}
			if manyQueues {
				cells = slices.Insert(cells, 1, any(j.Queue))
			}
			row(w, cells...)
		}
		if shown := page.offset + len(jobs); shown < total || page.offset > 0 {
			fmt.Fprintf(w, "(%d-%d of %d%s)\n", page.offset+1, shown, total, more(shown, total))
		}
	})
}

func (a *app) jobsShowCmd() *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "show ID [-q QUEUE]",
		Short: "Show one job: its state, args, attempts and errors",
		Long: `Show one job: its state, args, attempts and errors, and when set its concurrency
key (with the default limit it carries, its OnBusy policy and its last fencing
token), its unique key and scope, its runs started by JobAgain and when it was
last parked. Without -q every queue is searched.`,
		RunE: a.action(1, 1, func(ctx context.Context, b *backend, args []string) error {
			j, err := findJob(ctx, b, queue, args[0])
			if err != nil {
				return err
			}
			now := time.Now()
			return a.emit(toJobOut(j), func(w io.Writer) {
				row(w, "ID:", j.ID)
				row(w, "Queue:", j.Queue)
				row(w, "Kind:", j.Kind)
				row(w, "State:", j.State)
				row(w, "Priority:", j.Priority)
				row(w, "Attempt:", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
				row(w, "Created:", stamp(j.CreatedAt, now))
				row(w, "Run at:", stamp(j.RunAt, now))
				row(w, "Attempted:", stamp(j.AttemptedAt, now))
				row(w, "Finished:", stamp(j.FinishedAt, now))
				if j.State == baton.JobStateRunning {
					row(w, "Lease until:", stamp(j.LeaseUntil, now))
				}
				if !j.CancelRequestedAt.IsZero() {
					row(w, "Cancel requested:", stamp(j.CancelRequestedAt, now))
				}
				if j.Key != "" {
					row(w, "Key:", keyText(j.Key))
					row(w, "Key limit:", fmt.Sprintf("%d (the default it carries; an override set with 'baton limit set' wins)", j.Limit))
					row(w, "On busy:", cmp.Or(j.OnBusy, baton.OnBusyWait))
				}
				if j.Fence != 0 {
					row(w, "Fence:", j.Fence)
				}
				if !j.ParkedAt.IsZero() {
					row(w, "Parked at:", stamp(j.ParkedAt, now))
				}
				if j.Unique != "" {
					row(w, "Unique:", fmt.Sprintf("%s (scope %s)", keyText(j.Unique), j.UniqueScope))
				}
				if j.Runs > 0 {
					row(w, "Runs:", fmt.Sprintf("%d (started again by JobAgain)", j.Runs))
				}
				if len(j.Tags) > 0 {
					row(w, "Tags:", strings.Join(j.Tags, ", "))
				}
				row(w, "Args:", string(j.Args))
				if len(j.Metadata) > 0 {
					row(w, "Metadata:", string(j.Metadata))
				}
				if len(j.Output) > 0 {
					row(w, "Output:", string(j.Output))
				}
				if len(j.Errors) == 0 {
					row(w, "Errors:", "none")
					return
				}
				row(w, "Errors:")
				for _, e := range j.Errors {
					row(w, fmt.Sprintf("  attempt %d", e.Attempt), e.At.UTC().Format(time.RFC3339), e.Error)
				}
			})
		}),
	}
	queueFlag(cmd, &queue)
	return cmd
}

// findJob returns job id of queue, or with "" of whichever queue has it.
func findJob(ctx context.Context, b *backend, queue, id string) (*baton.JobRow, error) {
	queues, err := queuesOf(ctx, b, queue)
	if err != nil {
		return nil, err
	}
	return findJobIn(ctx, b, queues, queue, id)
}

// findJobIn returns job id of the first of queues that has it; queue is
// the -q the queues come from, for the error.
func findJobIn(ctx context.Context, b *backend, queues []string, queue, id string) (*baton.JobRow, error) {
	if id == "" {
		return nil, usageErr("empty job ID")
	}
	for _, q := range queues {
		j, err := b.client.JobGet(ctx, q, id)
		if errors.Is(err, baton.ErrJobNotFound) {
			continue
		}
		return j, err
	}
	if queue != "" {
		return nil, notFoundErr("job %s not found in queue %q", id, queue)
	}
	return nil, notFoundErr("job %s not found in any queue", id)
}

func (a *app) jobsRetryCmd() *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "retry ID... [-q QUEUE]",
		Short: "Make jobs available now, with their attempts reset",
		Long: `Make dead, cancelled, dropped, scheduled or available jobs available now, with
their attempts reset; a job whose concurrency key is busy is parked instead.
Running, parked and completed jobs cannot be retried.`,
		RunE: a.action(1, -1, func(ctx context.Context, b *backend, ids []string) error {
			return a.eachJob(ctx, b, queue, ids, "retried", retryJob)
		}),
	}
	queueFlag(cmd, &queue)
	return cmd
}

func (a *app) jobsCancelCmd() *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "cancel ID... [-q QUEUE]",
		Short: "Cancel jobs: queued ones at once, running ones asked to stop",
		Long: `Cancel jobs, in every process. A scheduled, parked or available job is cancelled at
once (in the dead set, "cancelled by the admin API"), freeing its concurrency key's slot
for the next parked job. A running job is asked to stop: its worker cancels the
handler's context at once (at its next heartbeat if the notice is lost), and the job
ends cancelled, not retried, unless its handler completes it first; 'baton jobs show'
shows the request meanwhile.
Completed, cancelled, dead and dropped jobs cannot be cancelled.`,
		RunE: a.action(1, -1, func(ctx context.Context, b *backend, ids []string) error {
			return a.eachJob(ctx, b, queue, ids, "cancelled", cancelJob)
		}),
	}
	queueFlag(cmd, &queue)
	return cmd
}

func (a *app) jobsDeleteCmd() *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "delete ID... [-q QUEUE]",
		Short: "Delete jobs that are not running",
		RunE: a.action(1, -1, func(ctx context.Context, b *backend, ids []string) error {
			return a.eachJob(ctx, b, queue, ids, "deleted", deleteJob)
		}),
	}
	queueFlag(cmd, &queue)
	return cmd
}

// retryJob retries j if the library takes it (baton.JobRetryable), else
// says which states it takes, without a call to the backend.
func retryJob(ctx context.Context, b *backend, j *baton.JobRow) error {
	if err := refuseState(j, "retried", baton.JobRetryable); err != nil {
		return err
	}
	_, err := b.client.JobRetry(ctx, j.Queue, j.ID)
	return err
}

// cancelJob cancels j if the library takes it (baton.JobCancellable), else
// says which states it takes, without a call to the backend.
func cancelJob(ctx context.Context, b *backend, j *baton.JobRow) error {
	if err := refuseState(j, "cancelled", baton.JobCancellable); err != nil {
		return err
	}
	_, err := b.client.JobCancel(ctx, j.Queue, j.ID)
	return err
}

// refuseState is the error for job j if its state is not one that ok
// takes, naming the states that are; nil if it is. done is the operation
// as in "can be done".
func refuseState(j *baton.JobRow, done string, ok func(baton.JobState) bool) error {
	if ok(j.State) {
		return nil
	}
	var states []string
	for _, st := range baton.JobStates {
		if ok(st) {
			states = append(states, string(st))
		}
	}
	return failedErr("job %s is %s: only %s and %s jobs can be %s", j.ID, j.State,
		strings.Join(states[:len(states)-1], ", "), states[len(states)-1], done)
}

func deleteJob(ctx context.Context, b *backend, j *baton.JobRow) error {
	if j.State == baton.JobStateRunning {
		return failedErr("job %s is running and cannot be deleted; it can be once its attempt ends", j.ID)
	}
	return b.client.JobDelete(ctx, j.Queue, j.ID)
}

// bulkOut is the result of an operation on many jobs.
type bulkOut struct {
	Done   []string    `json:"done"`
	Failed []bulkError `json:"failed,omitempty"`
}

type bulkError struct {
	ID       string `json:"id"`
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// eachJob applies op to the jobs ids and prints what became of each. It
// goes on past failures and returns the first one's exit code.
func (a *app) eachJob(ctx context.Context, b *backend, queue string, ids []string, done string,
	op func(context.Context, *backend, *baton.JobRow) error) error {
	// The queues are listed once for all the IDs.
	queues, err := queuesOf(ctx, b, queue)
	if err != nil {
		return err
	}
	out := bulkOut{Done: []string{}}
	var first *exitError
	for _, id := range ids {
		j, err := findJobIn(ctx, b, queues, queue, id)
		if err == nil {
			err = op(ctx, b, j)
		}
		if err != nil {
			ee := a.classify(err).(*exitError)
			if ee.code == exitUnreachable || ee.code == exitUsage {
				return ee
			}
			if first == nil {
				first = ee
			}
			out.Failed = append(out.Failed, bulkError{ID: id, Error: ee.err.Error(), ExitCode: ee.code})
			continue
		}
		out.Done = append(out.Done, id)
	}
	if err := a.emit(out, func(w io.Writer) {
		for _, id := range out.Done {
			fmt.Fprintf(w, "%s %s\n", done, id)
		}
	}); err != nil {
		return err
	}
	if first == nil {
		return nil
	}
	if len(ids) > 1 {
		msgs := make([]string, len(out.Failed))
		for i, f := range out.Failed {
			msgs[i] = f.Error
		}
		return &exitError{code: first.code, err: fmt.Errorf("%d of %d jobs not %s: %s", len(out.Failed), len(ids), done, strings.Join(msgs, "; "))}
	}
	return first
}

// intFlag is an int flag with bounds, so that a bad number is refused with
// a plain message (and exit code 2) before anything runs.
type intFlag struct {
	v        *int
	min, max int
}

func (f *intFlag) String() string {
	if f.v == nil {
		return "0"
	}
	return strconv.Itoa(*f.v)
}

func (f *intFlag) Set(s string) error {
	n, err := parseInt(s, f.min, f.max)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

func (f *intFlag) Type() string { return "int" }

// parseInt parses a whole number within [lo, hi].
func parseInt(s string, lo, hi int) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("not a whole number")
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("out of range %d..%d", lo, hi)
	}
	return n, nil
}

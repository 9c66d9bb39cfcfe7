package batontest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton"
)

// RequireInsertedOpts narrow the jobs the Require… helpers look for; nil,
// or the zero value, means any job of the kind.
type RequireInsertedOpts struct {
	// Queue is where the job must be. Default "": any queue. (Every queue
	// Client.QueueList names is searched either way, so that a failure
	// lists the jobs of the kind that went to another queue.)
	Queue string
	// States are the states a job may be in to count. Default nil: every
	// state, so a job that was inserted counts whatever became of it since
	// — run and completed, parked behind its key, dropped by OnBusyDrop,
	// dead. A completed or dropped job counts only while the backend keeps
	// it (Config.CompletedRetention, 24h by default); a dead one while it
	// stays in the dead set.
	States []baton.JobState
	// Priority, if not nil, is the priority the job must have.
	Priority *int
	// MaxAttempts, if not 0, is the MaxAttempts the job must have.
	MaxAttempts int
	// RunAt, if not zero, is when the job must be due (JobRow.RunAt),
	// give or take RunAtWithin: for a job inserted with InsertOpts.RunAt,
	// that time; one inserted to run at once has the time of its insert.
	// A job's RunAt moves when it is retried, snoozed or run again.
	RunAt time.Time
	// RunAtWithin is how far the job's RunAt may be from RunAt, either
	// way. Default 0: less than a millisecond, to which backends round
	// it. For a job inserted with a Delay, which the backend counts from
	// its own clock, give RunAt as time.Now().Add(delay) and a tolerance,
	// such as a second.
	RunAtWithin time.Duration
	// Key, if not empty, is the concurrency key the job must carry.
	Key string
	// Tags are tags the job must carry, each of them (it may carry more).
	Tags []string
	// Match, if not nil, must return true for the job. MatchArgs makes
	// one from a function of the decoded args.
	Match func(row *baton.JobRow) bool
}

// MatchArgs returns a RequireInsertedOpts.Match that decodes a job's args
// into T, as a worker does, and asks match. A job whose args do not decode
// into T does not match.
func MatchArgs[T baton.JobArgs](match func(args T) bool) func(row *baton.JobRow) bool {
	return func(row *baton.JobRow) bool {
		var args T
		if err := json.Unmarshal(row.Args, &args); err != nil {
			return false
		}
		return match(args)
	}
}

// ExpectedJob is one job RequireManyInserted expects: of Args's kind (the
// value of Args is not compared; use Opts.Match for that), matching Opts
// (nil: any job of the kind).
type ExpectedJob struct {
	Args baton.JobArgs
	Opts *RequireInsertedOpts
}

// RequireInserted requires that exactly one job of T's kind that matches
// opts (nil: any) was inserted through client's backend, and returns it
// with its args decoded as a worker decodes them. Otherwise it fails the
// test with tb.Fatalf, listing every job of the kind it found, with its
// queue, state and why it does not match.
func RequireInserted[T baton.JobArgs](ctx context.Context, tb testing.TB, client *baton.Client, opts *RequireInsertedOpts) *baton.Job[T] {
	tb.Helper()
	var zero T
	kind := zero.Kind()
	all := listJobs(ctx, tb, "RequireInserted", client, []string{kind})
	var found []*baton.JobRow
	for _, row := range all {
		if opts.mismatch(row) == "" {
			found = append(found, row)
		}
	}
	if len(found) != 1 {
		tb.Fatalf("batontest: RequireInserted: expected one job of kind %q%s; %d match\n%s",
			kind, opts.describe(), len(found), listing(kind, all, opts))
		return nil
	}
	job := &baton.Job[T]{JobRow: found[0]}
	if err := json.Unmarshal(found[0].Args, &job.Args); err != nil {
		tb.Fatalf("batontest: RequireInserted: job %s of kind %q: args %s do not decode into %T: %v",
			found[0].ID, kind, found[0].Args, job.Args, err)
		return nil
	}
	return job
}

// RequireNotInserted requires that no job of T's kind that matches opts
// (nil: any) was inserted through client's backend. Otherwise it fails the
// test with tb.Fatalf, listing every job of the kind it found.
func RequireNotInserted[T baton.JobArgs](ctx context.Context, tb testing.TB, client *baton.Client, opts *RequireInsertedOpts) {
	tb.Helper()
	var zero T
	kind := zero.Kind()
	all := listJobs(ctx, tb, "RequireNotInserted", client, []string{kind})
	n := 0
	for _, row := range all {
		if opts.mismatch(row) == "" {
			n++
		}
	}
	if n > 0 {
		tb.Fatalf("batontest: RequireNotInserted: expected no job of kind %q%s; %d match\n%s",
			kind, opts.describe(), n, listing(kind, all, opts))
	}
}

// RequireManyInserted requires that the jobs of the kinds named in
// expected, in every queue and state, are exactly the jobs expected: as
// many, and the first of them (in the order of their IDs) of the first
// expected kind and matching its Opts, and so on. It returns them in that
// order. Otherwise it fails the test with tb.Fatalf, listing what it
// expected and what it found.
//
// A job's ID orders it by when it was inserted: strictly for the jobs one
// process inserted, to the millisecond of their clocks across processes.
// A job's later runs (JobAgain) and retries keep its ID, and so its place.
func RequireManyInserted(ctx context.Context, tb testing.TB, client *baton.Client, expected []ExpectedJob) []*baton.JobRow {
	tb.Helper()
	var kinds []string
	for i, e := range expected {
		if e.Args == nil {
			tb.Fatalf("batontest: RequireManyInserted: expected job #%d has nil Args", i)
			return nil
		}
		if k := e.Args.Kind(); !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	all := listJobs(ctx, tb, "RequireManyInserted", client, kinds)
	ok := len(all) == len(expected)
	for i := 0; ok && i < len(all); i++ {
		ok = all[i].Kind == expected[i].Args.Kind() && expected[i].Opts.mismatch(all[i]) == ""
	}
	if ok {
		return all
	}
	var b strings.Builder
	fmt.Fprintf(&b, "batontest: RequireManyInserted: expected %d jobs of kinds %q, in this order:\n", len(expected), kinds)
	for i, e := range expected {
		fmt.Fprintf(&b, "\t%d. kind %q%s\n", i+1, e.Args.Kind(), e.Opts.describe())
	}
	fmt.Fprintf(&b, "found %d:\n", len(all))
	for i, row := range all {
		why := ""
		switch {
		case i >= len(expected):
			why = "not expected"
		case row.Kind != expected[i].Args.Kind():
			why = fmt.Sprintf("expected kind %q", expected[i].Args.Kind())
		default:
			why = expected[i].Opts.mismatch(row)
		}
		fmt.Fprintf(&b, "\t%d. %s", i+1, describeRow(row))
		if why != "" {
			fmt.Fprintf(&b, " — %s", why)
		}
		b.WriteByte('\n')
	}
	tb.Fatalf("%s", strings.TrimSuffix(b.String(), "\n"))
	return nil
}

// listJobs returns the jobs of kinds in every queue and state, in the
// order of their IDs; it fails the test on an error of the backend. Every
// queue is listed even when the options name one, so that a failure can
// show the jobs of the kind that went elsewhere.
func listJobs(ctx context.Context, tb testing.TB, helper string, client *baton.Client, kinds []string) []*baton.JobRow {
	tb.Helper()
	queues, err := client.QueueList(ctx)
	if err != nil {
		tb.Fatalf("batontest: %s: %v", helper, err)
		return nil
	}
	seen := map[string]bool{}
	var out []*baton.JobRow
	for _, q := range queues {
		for _, state := range baton.JobStates {
			for offset := 0; ; {
				rows, total, err := client.JobList(ctx, q, state, &baton.JobListOpts{Limit: 1000, Offset: offset})
				if err != nil {
					tb.Fatalf("batontest: %s: %v", helper, err)
					return nil
				}
				for _, row := range rows {
					// A job that moved on while the states were listed is
					// kept once, as first seen.
					if slices.Contains(kinds, row.Kind) && !seen[row.ID] {
						seen[row.ID] = true
						out = append(out, row)
					}
				}
				offset += len(rows)
				if len(rows) == 0 || offset >= total {
					break
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b *baton.JobRow) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// mismatch says why row does not match o, or "" if it does.
func (o *RequireInsertedOpts) mismatch(row *baton.JobRow) string {
	if o == nil {
		return ""
	}
	switch {
	case o.Queue != "" && row.Queue != o.Queue:
		return fmt.Sprintf("not in queue %q", o.Queue)
	case len(o.States) > 0 && !slices.Contains(o.States, row.State):
		return fmt.Sprintf("not %s", joinStates(o.States))
	case o.Priority != nil && row.Priority != *o.Priority:
		return fmt.Sprintf("not priority %d", *o.Priority)
	case o.MaxAttempts != 0 && row.MaxAttempts != o.MaxAttempts:
		return fmt.Sprintf("max attempts %d, not %d", row.MaxAttempts, o.MaxAttempts)
	case !o.RunAt.IsZero() && !runsAt(row.RunAt, o.RunAt, o.RunAtWithin):
		return fmt.Sprintf("due %s, not %s", row.RunAt.Format(timeFormat), o.describeRunAt())
	case o.Key != "" && row.Key != o.Key:
		return fmt.Sprintf("not key %q", o.Key)
	}
	for _, t := range o.Tags {
		if !slices.Contains(row.Tags, t) {
			return fmt.Sprintf("no tag %q", t)
		}
	}
	if o.Match != nil && !o.Match(row) {
		return "Match is false"
	}
	return ""
}

// describe is o as a clause of a message: "" for any job.
func (o *RequireInsertedOpts) describe() string {
	if o == nil {
		return ""
	}
	var parts []string
	if o.Queue != "" {
		parts = append(parts, fmt.Sprintf("queue %q", o.Queue))
	}
	if len(o.States) > 0 {
		parts = append(parts, "state "+joinStates(o.States))
	}
	if o.Priority != nil {
		parts = append(parts, fmt.Sprintf("priority %d", *o.Priority))
	}
	if o.MaxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", o.MaxAttempts))
	}
	if !o.RunAt.IsZero() {
		parts = append(parts, "due "+o.describeRunAt())
	}
	if o.Key != "" {
		parts = append(parts, fmt.Sprintf("key %q", o.Key))
	}
	if len(o.Tags) > 0 {
		parts = append(parts, fmt.Sprintf("tags %q", o.Tags))
	}
	if o.Match != nil {
		parts = append(parts, "Match true")
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, ", ")
}

// timeFormat shows a job's times to the millisecond, as backends keep
// them.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// runsAt reports whether a job due at got is due at want, give or take
// within, or less than a millisecond.
func runsAt(got, want time.Time, within time.Duration) bool {
	d := got.Sub(want).Abs()
	return d < time.Millisecond || d <= within
}

// describeRunAt is o.RunAt, with its tolerance.
func (o *RequireInsertedOpts) describeRunAt() string {
	s := o.RunAt.Format(timeFormat)
	if o.RunAtWithin > 0 {
		s += fmt.Sprintf(" ± %v", o.RunAtWithin)
	}
	return s
}

func joinStates(states []baton.JobState) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, " or ")
}

// listing lists the jobs of kind found, each with why it does not match o.
func listing(kind string, all []*baton.JobRow, o *RequireInsertedOpts) string {
	if len(all) == 0 {
		return fmt.Sprintf("no job of kind %q at all", kind)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "jobs of kind %q found (%d):", kind, len(all))
	for _, row := range all {
		fmt.Fprintf(&b, "\n\t%s", describeRow(row))
		if why := o.mismatch(row); why != "" {
			fmt.Fprintf(&b, " — %s", why)
		} else {
			b.WriteString(" — matches")
		}
	}
	return b.String()
}

// describeRow is one line about a job.
func describeRow(row *baton.JobRow) string {
	s := fmt.Sprintf("%s kind %q queue %q state %s priority %d max attempts %d due %s", row.ID, row.Kind, row.Queue, row.State,
		row.Priority, row.MaxAttempts, row.RunAt.Format(timeFormat))
	if row.Key != "" {
		s += fmt.Sprintf(" key %q", row.Key)
	}
	if len(row.Tags) > 0 {
		s += fmt.Sprintf(" tags %q", row.Tags)
	}
	return s + " args " + string(row.Args)
}

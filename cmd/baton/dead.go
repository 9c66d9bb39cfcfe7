package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
)

// deadStates make up the dead set: jobs that ended without success, kept
// for people to look at, retry or delete.
var deadStates = []baton.JobState{baton.JobStateDead, baton.JobStateCancelled}

func newDeadCmd(a *app) *cobra.Command {
	return group("dead", "List, retry and purge the dead set (dead and cancelled jobs)",
		a.deadListCmd(), a.deadRetryCmd(), a.deadPurgeCmd())
}

func (a *app) deadListCmd() *cobra.Command {
	var queue string
	var page pageFlags
	cmd := &cobra.Command{
		Use:   "list [-q QUEUE] [--limit N] [--offset N]",
		Short: "List dead and cancelled jobs, oldest first",
		Long: `List the dead set, dead and cancelled jobs, by when they finished, oldest first.
The two states (and, without -q, every queue) are merged, so --offset plus --limit may
not exceed 1000; past that, page one queue and state with
baton jobs list -q QUEUE --state dead (or cancelled).`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			queues, err := queuesOf(ctx, b, queue)
			if err != nil {
				return err
			}
			jobs, total, err := listJobs(ctx, b, queues, deadStates, page)
			if err != nil {
				return err
			}
			return a.emitJobs(jobs, total, page, len(queues) != 1)
		}),
	}
	queueFlag(cmd, &queue)
	page.add(cmd, "jobs")
	return cmd
}

func (a *app) deadRetryCmd() *cobra.Command {
	var queue string
	var all bool
	cmd := &cobra.Command{
		Use:   "retry (ID... | --all) [-q QUEUE]",
		Short: "Make dead-set jobs available again, attempts reset",
		Long: `Make jobs of the dead set available again, with their attempts reset: the ones
named, or with --all every dead and cancelled job (of QUEUE with -q).`,
		PreRunE: func(_ *cobra.Command, ids []string) error {
			if all == (len(ids) > 0) {
				return usageErr("give job IDs or --all, not both or neither")
			}
			return nil
		},
		RunE: a.action(0, -1, func(ctx context.Context, b *backend, ids []string) error {
			if !all {
				return a.eachJob(ctx, b, queue, ids, "retried", func(ctx context.Context, b *backend, j *baton.JobRow) error {
					if j.State != baton.JobStateDead && j.State != baton.JobStateCancelled {
						return failedErr("job %s is %s, not in the dead set (see 'baton jobs retry')", j.ID, j.State)
					}
					return retryJob(ctx, b, j)
				})
			}
			n, err := forDeadSet(ctx, b, queue, func(j *baton.JobRow) error {
				_, err := b.client.JobRetry(ctx, j.Queue, j.ID)
				return err
			})
			if err != nil {
				return err
			}
			return a.emit(map[string]int{"retried": n}, func(w io.Writer) {
				fmt.Fprintf(w, "retried %d jobs\n", n)
			})
		}),
	}
	queueFlag(cmd, &queue)
	cmd.Flags().BoolVar(&all, "all", false, "retry the whole dead set")
	return cmd
}

func (a *app) deadPurgeCmd() *cobra.Command {
	var queue string
	var yes bool
	cmd := &cobra.Command{
		Use:   "purge [-q QUEUE] --yes",
		Short: "Delete every dead and cancelled job",
		Long: `Delete every dead and cancelled job, of QUEUE with -q, else of every queue. It
cannot be undone, so it asks for --yes.`,
		PreRunE: func(*cobra.Command, []string) error {
			if !yes {
				return usageErr("dead purge deletes jobs for good: add --yes to do it")
			}
			return nil
		},
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			n, err := forDeadSet(ctx, b, queue, func(j *baton.JobRow) error {
				return b.client.JobDelete(ctx, j.Queue, j.ID)
			})
			if err != nil {
				return err
			}
			return a.emit(map[string]int{"deleted": n}, func(w io.Writer) {
				fmt.Fprintf(w, "deleted %d jobs\n", n)
			})
		}),
	}
	queueFlag(cmd, &queue)
	cmd.Flags().BoolVar(&yes, "yes", false, "really delete them")
	return cmd
}

// forDeadSet applies op to every job in the dead set of queue ("" for
// every queue) as it was when the call began, and returns how many it did.
// A job that left the dead set meanwhile (a retry by someone else, the
// retention sweep) is skipped: each job is read again just before op,
// which leaves one round trip in which it could still leave.
func forDeadSet(ctx context.Context, b *backend, queue string, op func(*baton.JobRow) error) (int, error) {
	queues, err := queuesOf(ctx, b, queue)
	if err != nil {
		return 0, err
	}
	// Read the IDs first: op removes jobs from the lists being paged.
	var jobs []*baton.JobRow
	for _, q := range queues {
		for _, st := range deadStates {
			for offset := 0; ; offset += maxPage {
				page, total, err := b.client.JobList(ctx, q, st, &baton.JobListOpts{Limit: maxPage, Offset: offset})
				if err != nil {
					return 0, err
				}
				jobs = append(jobs, page...)
				if len(page) == 0 || offset+len(page) >= total {
					break
				}
			}
		}
	}
	n := 0
	for _, j := range jobs {
		j, err := b.client.JobGet(ctx, j.Queue, j.ID)
		if err == nil && !slices.Contains(deadStates, j.State) {
			continue // retried by someone else since the listing
		}
		if err == nil {
			err = op(j)
		}
		if err != nil && isNotFound(err) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("after %d jobs: %w", n, err)
		}
		n++
	}
	return n, nil
}

func isNotFound(err error) bool { return errors.Is(err, baton.ErrJobNotFound) }

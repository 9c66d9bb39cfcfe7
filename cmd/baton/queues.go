package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
)

// retryScan is how many scheduled jobs of a queue `queues` and `stats` read
// to count the retrying ones: one page. The backend keeps no such count
// (a retry waiting for its backoff is a scheduled job that has run before),
// so past this the count is a lower bound, marked "+" and retrying_exact
// false.
const retryScan = 1000

// queueOut is one queue as `queues` prints it.
type queueOut struct {
	Queue     string `json:"queue"`
	Paused    bool   `json:"paused"`
	Available int    `json:"available"` // the queue's depth
	Running   int    `json:"running"`
	Scheduled int    `json:"scheduled"` // retrying ones included
	Retrying  int    `json:"retrying"`
	// RetryingExact is false when Retrying counts only the first retryScan
	// scheduled jobs.
	RetryingExact bool `json:"retrying_exact"`
	Parked        int  `json:"parked"`
	Dead          int  `json:"dead"`
	Cancelled     int  `json:"cancelled"`
	Completed     int  `json:"completed"`
	Dropped       int  `json:"dropped"` // kept for the retention
	// DroppedEver counts every job ever dropped, the swept ones included.
	DroppedEver int64 `json:"dropped_ever"`
	// Keys counts the active concurrency keys (see `keys list`).
	Keys            int        `json:"keys"`
	OldestAvailable *time.Time `json:"oldest_available,omitempty"`
}

func newQueuesCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "queues",
		Short: "List the queues with their jobs by state",
		Long: `List every queue that ever had a job, with its jobs by state:
  AVAILABLE  waiting for a worker: the queue's depth
  RUNNING    leased to a worker
  SCHEDULED  waiting for their time: delayed, snoozed or retrying
  RETRYING   the scheduled ones that have run before and failed (counted over
             the first 1000 scheduled jobs; "+" marks a lower bound)
  PARKED     waiting for a slot of their concurrency key, invisible to fetchers
  DEAD, CANCELLED  the dead set; COMPLETED  kept for their retention
  DROPPED (EVER)   dropped by their OnBusy policy when their key was busy, kept
             for the retention; in brackets every job ever dropped
  KEYS       active concurrency keys: with holders, parked jobs or an override
  OLDEST     how long the oldest available job has waited`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			qs, err := allQueueStats(ctx, b)
			if err != nil {
				return err
			}
			now := time.Now()
			return a.emit(map[string]any{"queues": qs}, func(w io.Writer) {
				if len(qs) == 0 {
					fmt.Fprintln(w, "no queues yet: none has had a job")
					return
				}
				row(w, "QUEUE", "STATUS", "AVAILABLE", "RUNNING", "SCHEDULED", "RETRYING", "PARKED",
					"DEAD", "CANCELLED", "COMPLETED", "DROPPED (EVER)", "KEYS", "OLDEST")
				for _, q := range qs {
					status := "active"
					if q.Paused {
						status = "paused"
					}
					oldest := "-"
					if q.OldestAvailable != nil {
						oldest = human(now.Sub(*q.OldestAvailable))
					}
					row(w, q.Queue, status, q.Available, q.Running, q.Scheduled, retrying(q.Retrying, q.RetryingExact), q.Parked,
						q.Dead, q.Cancelled, q.Completed, fmt.Sprintf("%d (%d)", q.Dropped, q.DroppedEver), q.Keys, oldest)
				}
			})
		}),
	}
}

func retrying(n int, exact bool) string {
	if exact {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("%d+", n)
}

// allQueueStats returns every queue's counts, by name.
func allQueueStats(ctx context.Context, b *backend) ([]*queueOut, error) {
	stats, err := b.client.QueueStatsAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*queueOut, 0, len(stats))
	for _, s := range stats {
		q, err := queueStats(ctx, b, s)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// queueStats is one queue's counts as `queues` prints them, with its
// retrying jobs counted.
func queueStats(ctx context.Context, b *backend, s *baton.QueueStats) (*queueOut, error) {
	q := &queueOut{
		Queue:           s.Queue,
		Paused:          s.Paused,
		Available:       s.Counts[baton.JobStateAvailable],
		Running:         s.Counts[baton.JobStateRunning],
		Scheduled:       s.Counts[baton.JobStateScheduled],
		Dead:            s.Counts[baton.JobStateDead],
		Cancelled:       s.Counts[baton.JobStateCancelled],
		Completed:       s.Counts[baton.JobStateCompleted],
		Parked:          s.Counts[baton.JobStateParked],
		Dropped:         s.Counts[baton.JobStateDropped],
		DroppedEver:     s.Dropped,
		Keys:            s.Keys,
		OldestAvailable: timePtr(s.OldestAvailable),
		RetryingExact:   true,
	}
	if q.Scheduled > 0 {
		jobs, total, err := b.client.JobList(ctx, s.Queue, baton.JobStateScheduled, &baton.JobListOpts{Limit: retryScan})
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			if j.Attempt > 0 {
				q.Retrying++
			}
		}
		q.RetryingExact = total <= len(jobs)
	}
	return q, nil
}

// statsOut is the totals `stats` prints.
type statsOut struct {
	Queues          int        `json:"queues"`
	Paused          int        `json:"paused"`
	Available       int        `json:"available"`
	Running         int        `json:"running"`
	Scheduled       int        `json:"scheduled"`
	Retrying        int        `json:"retrying"`
	RetryingExact   bool       `json:"retrying_exact"`
	Parked          int        `json:"parked"`
	Dead            int        `json:"dead"`
	Cancelled       int        `json:"cancelled"`
	Completed       int        `json:"completed"`
	Dropped         int        `json:"dropped"`
	DroppedEver     int64      `json:"dropped_ever"`
	Keys            int        `json:"keys"` // active concurrency keys
	OldestAvailable *time.Time `json:"oldest_available,omitempty"`
}

func newStatsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Show totals over every queue",
		Long: `Show the number of queues and their jobs by state, added up over every queue,
how long the oldest available job has waited, how many jobs were ever dropped and
how many concurrency keys are active. 'baton queues' explains the states.`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			qs, err := allQueueStats(ctx, b)
			if err != nil {
				return err
			}
			s := statsOut{Queues: len(qs), RetryingExact: true}
			for _, q := range qs {
				if q.Paused {
					s.Paused++
				}
				s.Available += q.Available
				s.Running += q.Running
				s.Scheduled += q.Scheduled
				s.Retrying += q.Retrying
				s.RetryingExact = s.RetryingExact && q.RetryingExact
				s.Dead += q.Dead
				s.Cancelled += q.Cancelled
				s.Completed += q.Completed
				s.Parked += q.Parked
				s.Dropped += q.Dropped
				s.DroppedEver += q.DroppedEver
				s.Keys += q.Keys
				if q.OldestAvailable != nil && (s.OldestAvailable == nil || q.OldestAvailable.Before(*s.OldestAvailable)) {
					s.OldestAvailable = q.OldestAvailable
				}
			}
			now := time.Now()
			return a.emit(s, func(w io.Writer) {
				row(w, "Queues:", fmt.Sprintf("%d (%d paused)", s.Queues, s.Paused))
				avail := fmt.Sprint(s.Available)
				if s.OldestAvailable != nil {
					avail += fmt.Sprintf(" (oldest waiting %s)", human(now.Sub(*s.OldestAvailable)))
				}
				row(w, "Available:", avail)
				row(w, "Running:", s.Running)
				row(w, "Scheduled:", fmt.Sprintf("%d (retrying: %s)", s.Scheduled, retrying(s.Retrying, s.RetryingExact)))
				row(w, "Parked:", s.Parked)
				row(w, "Dead:", s.Dead)
				row(w, "Cancelled:", s.Cancelled)
				row(w, "Completed:", s.Completed)
				row(w, "Dropped:", fmt.Sprintf("%d (ever: %d)", s.Dropped, s.DroppedEver))
				row(w, "Active keys:", s.Keys)
			})
		}),
	}
}

func newQueueCmd(a *app) *cobra.Command {
	return group("queue", "Pause or resume a queue",
		a.pauseCmd("pause", false, "Stop every process from fetching from QUEUE",
			"Stop every process from fetching from QUEUE. Inserts go on and running jobs finish."),
		a.pauseCmd("resume", true, "Let every process fetch from QUEUE again",
			"Let every process fetch from QUEUE again."),
	)
}

func (a *app) pauseCmd(verb string, resume bool, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " QUEUE",
		Short: short,
		Long:  long + "\nQUEUE must have had a job (see 'baton queues'), so that a typo cannot pause nothing.",
		RunE: a.action(1, 1, func(ctx context.Context, b *backend, args []string) error {
			q := args[0]
			if err := requireQueue(ctx, b, q); err != nil {
				return err
			}
			op := b.client.QueuePause
			if resume {
				op = b.client.QueueResume
			}
			if err := op(ctx, q); err != nil {
				return err
			}
			return a.emit(map[string]any{"queue": q, "paused": !resume}, func(w io.Writer) {
				fmt.Fprintf(w, "queue %s %sd\n", q, verb)
			})
		}),
	}
}

// queuesOf returns the queues a command works on: the one named, which must
// exist, or with "" every queue.
func queuesOf(ctx context.Context, b *backend, queue string) ([]string, error) {
	names, err := b.client.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	if queue == "" {
		return names, nil
	}
	if !slices.Contains(names, queue) {
		return nil, queueNotFound(queue, names)
	}
	return []string{queue}, nil
}

// requireQueue fails with exitNotFound unless queue has had a job, and
// with exitUsage if it is empty: a QUEUE argument names one queue, where
// queuesOf takes "" (no -q) for every queue.
func requireQueue(ctx context.Context, b *backend, queue string) error {
	if queue == "" {
		return usageErr("empty QUEUE: name a queue (see 'baton queues')")
	}
	_, err := queuesOf(ctx, b, queue)
	return err
}

func queueNotFound(queue string, names []string) error {
	known := "there are no queues yet"
	if len(names) > 0 {
		known = "known queues: " + strings.Join(names, ", ")
	}
	return notFoundErr("queue %q not found (%s)", queue, known)
}

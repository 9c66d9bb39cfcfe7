package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
)

// processOut is one live process as `processes` prints it.
type processOut struct {
	ID             string            `json:"id"`
	Name           string            `json:"name"`
	Host           string            `json:"host"`
	PID            int               `json:"pid"`
	Version        string            `json:"version"`
	Queues         []processQueueOut `json:"queues"`
	StrictPriority bool              `json:"strict_priority"`
	Concurrency    int               `json:"concurrency"`
	Busy           int               `json:"busy"`
	Stopping       bool              `json:"stopping"`
	StartedAt      time.Time         `json:"started_at"`
	SeenAt         time.Time         `json:"seen_at"`
	ExpiresAt      time.Time         `json:"expires_at"`
}

type processQueueOut struct {
	Name       string `json:"name"`
	Weight     int    `json:"weight"`
	MaxWorkers int    `json:"max_workers"` // 0: no cap but its concurrency
}

func newProcessesCmd(a *app) *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "processes [-q QUEUE]",
		Short: "List the worker processes working the queues now",
		Long: `List the live worker processes — the started clients on every machine — by host,
then PID:
  HOST, PID  where the process runs
  NAME       its Config.ProcessName ("-": none)
  STATE      running, or stopping: its Stop has begun, it waits for its jobs
  BUSY       workers in use of its Config.Concurrency, at its last beat
  QUEUES     the queues it works: "critical=6 default=3" with their weights, or
             "critical > default" in strict priority order; ",max=N" after a
             queue whose QueueConfig.MaxWorkers caps its workers
  STARTED    when it started (its first beat)
  SEEN       its last beat
  VERSION    the version of Baton it runs
  ID         its record's ID, new at each start

A started client records itself at once and renews its record every
Config.ProcessTTL/3 (10s by default), with its busy workers then; it removes it
when its Stop returns. A process that crashed or lost Redis drops out ProcessTTL
(30s by default) after its last beat, by Redis's clock.

With -q, only the processes that work QUEUE (their BUSY counts all their workers,
whatever queue they serve).`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			list, err := b.client.ProcessList(ctx)
			if err != nil {
				return err
			}
			if queue != "" {
				list = slices.DeleteFunc(list, func(p *baton.ProcessInfo) bool { return !p.Works(queue) })
			}
			now := time.Now()
			out := make([]*processOut, len(list))
			busy, workers := 0, 0
			for i, p := range list {
				out[i] = toProcessOut(p)
				busy += p.Busy
				workers += p.Concurrency
			}
			return a.emit(map[string]any{"processes": out}, func(w io.Writer) {
				if len(list) == 0 && queue != "" {
					fmt.Fprintf(w, "no live process works %s: started clients list themselves here while they run\n", queue)
					return
				}
				if len(list) == 0 {
					fmt.Fprintln(w, "no live processes: started clients list themselves here while they run")
					return
				}
				row(w, "HOST", "PID", "NAME", "STATE", "BUSY", "QUEUES", "STARTED", "SEEN", "VERSION", "ID")
				for _, p := range list {
					state := "running"
					if p.Stopping {
						state = "stopping"
					}
					row(w, clip(p.Host, 40), p.PID, orDash(clip(p.Name, 30)), state,
						strconv.Itoa(p.Busy)+"/"+strconv.Itoa(p.Concurrency), clip(queuesCell(p), 60),
						when(notAfter(p.StartedAt, now), now), when(notAfter(p.SeenAt, now), now),
						orDash(clip(p.Version, 30)), p.ID)
				}
				noun := "processes"
				if len(list) == 1 {
					noun = "process"
				}
				if queue != "" {
					fmt.Fprintf(w, "(%d %s working %s, %d of %d workers busy)\n", len(list), noun, queue, busy, workers)
					return
				}
				fmt.Fprintf(w, "(%d %s, %d of %d workers busy)\n", len(list), noun, busy, workers)
			})
		}),
	}
	queueFlag(cmd, &queue)
	return cmd
}

func toProcessOut(p *baton.ProcessInfo) *processOut {
	o := &processOut{
		ID: p.ID, Name: p.Name, Host: p.Host, PID: p.PID, Version: p.Version,
		Queues: []processQueueOut{}, StrictPriority: p.StrictPriority,
		Concurrency: p.Concurrency, Busy: p.Busy, Stopping: p.Stopping,
		StartedAt: p.StartedAt.UTC(), SeenAt: p.SeenAt.UTC(), ExpiresAt: p.ExpiresAt.UTC(),
	}
	for _, q := range p.Queues {
		o.Queues = append(o.Queues, processQueueOut{Name: q.Name, Weight: q.Weight, MaxWorkers: q.MaxWorkers})
	}
	return o
}

// queuesCell renders a process's queues: "a > b" in strict priority
// order, else "a=6 b=3" with the weights, and ",max=N" after a queue with
// a cap ('=' and ',' are in no queue name).
func queuesCell(p *baton.ProcessInfo) string {
	parts := make([]string, len(p.Queues))
	for i, q := range p.Queues {
		parts[i] = q.Name
		if !p.StrictPriority {
			parts[i] += "=" + strconv.Itoa(q.Weight)
		}
		if q.MaxWorkers > 0 {
			parts[i] += ",max=" + strconv.Itoa(q.MaxWorkers)
		}
	}
	if p.StrictPriority {
		return strings.Join(parts, " > ")
	}
	return strings.Join(parts, " ")
}

// notAfter is t, or now if t is later: a time of the backend's clock that
// is ahead of this machine's reads "0ms ago", not "in 5ms".
func notAfter(t, now time.Time) time.Time {
	if t.After(now) {
		return now
	}
	return t
}

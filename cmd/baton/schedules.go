package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
)

// scheduleOut is one schedule as `schedules` prints it.
type scheduleOut struct {
	Name     string     `json:"name"`
	Queue    string     `json:"queue"`
	Kind     string     `json:"kind"`
	Spec     string     `json:"spec"`
	LastTick *time.Time `json:"last_tick,omitempty"`
	// NextTick is omitted when the spec cannot be parsed (a schedule of
	// the application's own).
	NextTick     *time.Time `json:"next_tick,omitempty"`
	RegisteredAt time.Time  `json:"registered_at"`
	SeenAt       time.Time  `json:"seen_at"`
	ExpiresAt    time.Time  `json:"expires_at"`
}

func newSchedulesCmd(a *app) *cobra.Command {
	var queue string
	cmd := &cobra.Command{
		Use:   "schedules [-q QUEUE]",
		Short: "List the recurring schedules the running clients registered",
		Long: `List the recurring schedules (Config.PeriodicJobs) that started clients registered
in the backend, by name:
  QUEUE, KIND  where the schedule's jobs go, and their kind
  SPEC       when it fires: "every 15m0s" (baton.Every) or a cron spec (baton.Cron)
  LAST TICK  the last tick inserted ("-": none yet)
  NEXT TICK  the next tick by the spec, if a client runs the schedule then ("-": a
             schedule of the application's own, whose spec baton cannot read)
  SEEN       when a client last registered it: running clients do every 5 minutes,
             so an older time means that none runs it now

A client registers a schedule at its first tick, and when it starts if the schedule
was registered before; one that no client has registered for a week is dropped.`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			if queue != "" {
				if err := requireQueue(ctx, b, queue); err != nil {
					return err
				}
			}
			now := time.Now() // before the next ticks are computed: they are after it
			list, err := b.client.ScheduleList(ctx)
			if err != nil {
				return err
			}
			var shown []*baton.ScheduleInfo
			out := []*scheduleOut{}
			for _, s := range list {
				if queue != "" && s.Queue != queue {
					continue
				}
				shown = append(shown, s)
				out = append(out, &scheduleOut{
					Name: s.Name, Queue: s.Queue, Kind: s.Kind, Spec: s.Spec,
					LastTick: timePtr(s.LastTick), NextTick: timePtr(s.NextTick),
					RegisteredAt: s.RegisteredAt.UTC(), SeenAt: s.SeenAt.UTC(), ExpiresAt: s.ExpiresAt.UTC(),
				})
			}
			return a.emit(map[string]any{"schedules": out}, func(w io.Writer) {
				if len(out) == 0 {
					fmt.Fprintln(w, "no schedules registered: started clients register their periodic jobs from their first tick on")
					return
				}
				row(w, "NAME", "QUEUE", "KIND", "SPEC", "LAST TICK", "NEXT TICK", "SEEN")
				for _, s := range shown {
					seen := s.SeenAt
					if seen.After(now) { // the backend's clock, or a registration since
						seen = now
					}
					row(w, clip(s.Name, 40), s.Queue, clip(s.Kind, 30), orDash(clip(s.Spec, 40)),
						when(s.LastTick, now), when(s.NextTick, now), when(seen, now))
				}
			})
		}),
	}
	queueFlag(cmd, &queue)
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

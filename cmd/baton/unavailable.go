package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// The commands that exist but cannot work yet. They fail with
// exitUnavailable and say why, rather than print something made up.

const schedulesWhy = "recurring schedules cannot be listed: they live in each process's " +
	"Config.PeriodicJobs, not in the backend"

const schedulesLong = `Not available (exit code 5): ` + schedulesWhy + `.

The backend keeps only the last tick inserted under each schedule's name (in its
queue's meta record), and the client has no call to read even that. Listing
schedules needs the processes to register them in the backend first.`

func newSchedulesCmd(*app) *cobra.Command {
	return &cobra.Command{
		Use:   "schedules",
		Short: "Not available: schedules are not stored in the backend",
		Long:  schedulesLong,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return &exitError{code: exitUnavailable, err: errors.New(schedulesWhy)}
		},
	}
}

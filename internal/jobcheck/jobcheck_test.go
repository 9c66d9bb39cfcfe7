package jobcheck

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// Times in these histories are nanoseconds; process 1 is killed at 100,
// process 2 never.

func TestCheckValid(t *testing.T) {
	t.Parallel()
	execs := []Execution{
		{Job: "once", Process: 2, Start: 10, End: 20, Recorded: true},
		// Killed while it ran, then run again after the kill.
		{Job: "cut", Process: 1, Start: 50, Killed: 100},
		{Job: "cut", Process: 2, Start: 700, End: 720, Recorded: true},
		// Ended, but killed before its outcome was recorded: the lease
		// was renewed until the kill, so it runs again after it.
		{Job: "unrecorded", Process: 1, Start: 60, End: 90, Killed: 100},
		{Job: "unrecorded", Process: 2, Start: 750, End: 760, Recorded: true},
		// Its lease lost while it ran: the handler returned, then the job
		// ran again.
		{Job: "lost", Process: 2, Start: 10, End: 30, Lost: true},
		{Job: "lost", Process: 2, Start: 40, End: 50, Recorded: true},
		// Recorded, but the acknowledgement was cut off by the kill.
		{Job: "ackcut", Process: 1, Start: 10, End: 20, Killed: 100},
		// Cut off by the kill's signal at 90, run again while the killed
		// process was torn down, before its killer reaped it at 100 (a
		// Cluster crash run failed on such a history when the next run
		// had to start after the reaping).
		{Job: "torndown", Process: 1, Start: 40, Signalled: 90, Killed: 100},
		{Job: "torndown", Process: 2, Start: 95, End: 99, Recorded: true},
		// Twice cut off.
		{Job: "twice", Process: 1, Start: 70, Killed: 100},
		{Job: "twice", Process: 3, Start: 800, Killed: 900},
		{Job: "twice", Process: 2, Start: 1500, End: 1550, Recorded: true},
	}
	counts, err := Check([]string{"once", "cut", "unrecorded", "lost", "ackcut", "torndown", "twice"}, execs)
	require.NoError(t, err)
	require.Equal(t, Counts{Jobs: 7, Executions: len(execs), Killed: 5, Lost: 1}, counts)
}

// TestCheckCatchesUnexplainedRuns feeds the checker broken histories. The
// first three pass the check the crash test had before this package: it
// explained a job's extra run by its process having been killed at any
// time, before or after, with no times logged.
func TestCheckCatchesUnexplainedRuns(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		execs []Execution
		want  string
	}{
		"run again after its outcome was recorded, in a process killed later": {
			[]Execution{
				{Job: "j", Process: 1, Start: 10, End: 20, Recorded: true, Killed: 100},
				{Job: "j", Process: 2, Start: 30, End: 40, Recorded: true},
			},
			"ran again (run 2) after run 1's outcome was recorded",
		},
		"run again while its killed process still ran it": {
			[]Execution{
				{Job: "j", Process: 1, Start: 10, Killed: 100},
				{Job: "j", Process: 2, Start: 50, End: 60, Recorded: true},
			},
			"run 2 started before run 1 was cut off",
		},
		"run twice at once by two workers of a process killed later": {
			[]Execution{
				{Job: "j", Process: 1, Start: 10, End: 30, Killed: 100},
				{Job: "j", Process: 1, Start: 15, End: 25, Recorded: true, Killed: 100},
			},
			"run 2 started before run 1 was cut off",
		},
		"run again before the signal of the kill that cut it off": {
			[]Execution{
				{Job: "j", Process: 1, Start: 10, Signalled: 90, Killed: 100},
				{Job: "j", Process: 2, Start: 80, End: 95, Recorded: true},
			},
			"run 2 started before run 1 was cut off",
		},
		"run again after a run in a process never killed": {
			[]Execution{
				{Job: "j", Process: 2, Start: 10, End: 20},
				{Job: "j", Process: 2, Start: 30, End: 40, Recorded: true},
			},
			"ran again (run 2) after run 1 ended in a process never killed",
		},
		"run again before the handler that lost its lease returned": {
			[]Execution{
				{Job: "j", Process: 2, Start: 10, End: 60, Lost: true},
				{Job: "j", Process: 2, Start: 50, End: 70, Recorded: true},
			},
			"run 2 started before run 1 was cut off",
		},
		"last run did not end": {
			[]Execution{{Job: "j", Process: 2, Start: 10}},
			"its last run did not end",
		},
		"last run lost its lease": {
			[]Execution{{Job: "j", Process: 2, Start: 10, End: 20, Lost: true}},
			"its last run lost its lease",
		},
		"last run's outcome not recorded in a live process": {
			[]Execution{{Job: "j", Process: 2, Start: 10, End: 20}},
			"its last run's outcome was not recorded",
		},
		"never ran": {
			nil,
			"job j: never ran",
		},
		"a job not of the history": {
			[]Execution{{Job: "j", Process: 2, Start: 1, End: 2, Recorded: true}, {Job: "x", Process: 2, Start: 1, End: 2, Recorded: true}},
			"job x: not a job of the history",
		},
		"logged after its process died": {
			[]Execution{{Job: "j", Process: 1, Start: 110, End: 120, Recorded: true, Killed: 100}},
			"run 1 starts after its process died",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Check([]string{"j"}, tc.execs)
			var bad *Error
			require.True(t, errors.As(err, &bad), "want an *Error, got %v", err)
			require.Contains(t, err.Error(), tc.want)
			require.Len(t, bad.Jobs, 1)
		})
	}
}

func TestErrorListsAtMostTwenty(t *testing.T) {
	t.Parallel()
	var jobs []string
	for i := range 25 {
		jobs = append(jobs, string(rune('a'+i)))
	}
	_, err := Check(jobs, nil)
	var bad *Error
	require.True(t, errors.As(err, &bad))
	require.Len(t, bad.Jobs, 25)
	require.Len(t, bad.Violations, 20)
	require.Contains(t, err.Error(), "and 5 more")
}

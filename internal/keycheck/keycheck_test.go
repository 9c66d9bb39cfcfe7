package keycheck

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckValid(t *testing.T) {
	execs := []Execution{
		{Job: "a", Key: "k", Fence: 1, Start: 0, End: 10},
		{Job: "b", Key: "k", Fence: 2, Start: 10, End: 20}, // starts as a ends
		{Job: "c", Key: "k3", Fence: 5, Start: 0, End: 30},
		{Job: "d", Key: "k3", Fence: 6, Start: 1, End: 30},
		{Job: "e", Key: "k3", Fence: 7, Start: 2}, // killed, never ended
		// Granted together, the later fence's handler ran first.
		{Job: "f", Key: "k3", Fence: 9, Start: 40, End: 41},
		{Job: "g", Key: "k3", Fence: 8, Start: 42, End: 43},
		// Its lease lost while it ran, it returned before the server let
		// the slot go; the job ran again after.
		{Job: "h", Key: "k", Fence: 3, Start: 21, End: 25, Lost: true},
		{Job: "h", Key: "k", Fence: 4, Start: 40, End: 45},
		{Job: "i", Key: "k", Fence: 5, Start: 46, End: 46}, // ran for no time
		{Job: "j", Key: "k", Fence: 6, Start: 46, End: 50},
	}
	require.NoError(t, Check(execs, map[string]int{"k": 1, "k3": 3}))
}

func TestCheckViolations(t *testing.T) {
	for name, tc := range map[string]struct {
		execs []Execution
		want  string
	}{
		"over limit": {
			[]Execution{{Job: "a", Key: "k", Fence: 1, Start: 0, End: 10}, {Job: "b", Key: "k", Fence: 2, Start: 5, End: 20}},
			"2 executions at once (limit 1)",
		},
		"handler that lost its lease ran on past its successor's start": {
			[]Execution{{Job: "a", Key: "k", Fence: 1, Start: 0, End: 30, Lost: true}, {Job: "b", Key: "k", Fence: 2, Start: 20, End: 40}},
			"2 executions at once (limit 1) when job b (fence 2) started: job a (fence 1, lease lost), job b (fence 2)",
		},
		"fence went back after a lost lease": {
			[]Execution{{Job: "a", Key: "k", Fence: 9, Start: 0, End: 1, Lost: true}, {Job: "b", Key: "k", Fence: 3, Start: 2, End: 3}},
			"job b (fence 3) started after job a (fence 9, lease lost) ended",
		},
		"killed holder still counts": {
			[]Execution{{Job: "a", Key: "k", Fence: 1, Start: 0}, {Job: "b", Key: "k", Fence: 2, Start: 5, End: 20}},
			"2 executions at once",
		},
		"fence reused": {
			[]Execution{{Job: "a", Key: "k", Fence: 1, Start: 0, End: 1}, {Job: "b", Key: "k", Fence: 1, Start: 2, End: 3}},
			"fence 1 given to jobs a and b",
		},
		"one lease run twice, on a key of limit 3": {
			[]Execution{{Job: "a", Key: "k3", Fence: 4, Start: 0, End: 1}, {Job: "a", Key: "k3", Fence: 4, Start: 2, End: 3}},
			"job a ran twice with fence 4",
		},
		"fence went back": {
			[]Execution{{Job: "a", Key: "k", Fence: 9, Start: 0, End: 1}, {Job: "b", Key: "k", Fence: 3, Start: 2, End: 3}},
			"with fence 3 not above 9",
		},
		"fence went back beside a run never ended": {
			[]Execution{{Job: "a", Key: "k", Fence: 9, Start: 0, End: 1}, {Job: "b", Key: "k", Fence: 3, Start: 2, End: 3},
				{Job: "c", Key: "k", Fence: 10, Start: 4}},
			"with fence 3 not above 9",
		},
		"no fence": {
			[]Execution{{Job: "a", Key: "k", Start: 0, End: 1}},
			"ran without a fence",
		},
		"unknown key": {
			[]Execution{{Job: "a", Key: "x", Fence: 1}},
			`key "x" has no limit`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			err := Check(tc.execs, map[string]int{"k": 1, "k3": 3})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

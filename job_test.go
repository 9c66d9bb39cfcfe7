package baton_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// JobStates lists the states the root package names, in the driver's
// order, and is the root's own copy.
func TestJobStates(t *testing.T) {
	t.Parallel()
	require.Equal(t, []baton.JobState{baton.JobStateScheduled, baton.JobStateParked, baton.JobStateAvailable, baton.JobStateRunning,
		baton.JobStateCompleted, baton.JobStateCancelled, baton.JobStateDead, baton.JobStateDropped}, baton.JobStates)
	require.Equal(t, batondriver.JobStates, baton.JobStates)
	require.NotSame(t, &batondriver.JobStates[0], &baton.JobStates[0])
}

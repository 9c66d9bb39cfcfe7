package batonui

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
)

func TestUnescapeHTML(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"\u003cscript\u003e \u0026"}`: `{"a":"<script> &"}`,
		`{"a":"\\u003c"}`:                   `{"a":"\\u003c"}`, // an escaped backslash, then text
		`{"a":"\"\u00e9\n"}`:                `{"a":"\"\u00e9\n"}`,
		`["\u003C"]`:                        `["<"]`,
	} {
		require.Equal(t, want, unescapeHTML([]byte(in)), in)
	}
}

// TestCanRetry: a page offers a retry only where the library takes one
// (baton.JobRetryable), and not for an available job, which is already
// waiting for a worker.
func TestCanRetry(t *testing.T) {
	t.Parallel()
	offered := map[baton.JobState]bool{
		baton.JobStateDead: true, baton.JobStateCancelled: true, baton.JobStateDropped: true, baton.JobStateScheduled: true,
	}
	for _, state := range baton.JobStates {
		got := canRetry(&baton.JobRow{State: state})
		require.Equal(t, offered[state], got, state)
		if got {
			require.True(t, baton.JobRetryable(state), "%s: offered but refused by JobRetry", state)
		}
	}
}

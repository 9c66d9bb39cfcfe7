package baton

// White-box tests of launch: which running execution a chained job is
// started behind, which no caller can arrange at will.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A chained job goes behind the execution of the job ahead only if that
// execution holds the lease it was chained behind. On Redis, a process's
// next call settles its calls whose replies were lost, and gives back the
// jobs they leased; one of them may by then be running chained, with a job
// chained behind it by a finish whose reply did arrive, and be leased to
// the process again. Its new execution, of a later lease and so a higher
// fence, must not run the job chained behind the old one, which the
// backend has put back at the head of its key's parked jobs: given back,
// that stale chain changes nothing.
func TestLaunchChainsBehindTheSameLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fence  int64 // the chained job's; the job ahead's is 20
		behind bool
	}{
		{"SameLease", 21, true},
		{"LaterLease", 19, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &runner{cfg: &config{Config: Config{LeaseTTL: time.Second}}, running: map[execKey]*execution{}}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			ahead := &execution{queue: "q", row: &JobRow{ID: "a", Fence: 20, Lease: "la"}, ctx: ctx, cancel: cancel}
			r.running[execKey{"q", "a"}] = ahead
			row := &JobRow{ID: "b", After: "a", Fence: tc.fence, Lease: "lb"}
			started, back := r.launch("q", []*JobRow{row}, time.Now(), true)
			require.Zero(t, started)
			if tc.behind {
				require.Same(t, row, ahead.next)
				require.Empty(t, back)
				return
			}
			require.Nil(t, ahead.next)
			require.Len(t, back, 1)
			require.Equal(t, "b", back[0].ID)
			require.Equal(t, "lb", back[0].Lease)
			require.True(t, back[0].GiveBack)
		})
	}
}

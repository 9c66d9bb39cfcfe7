package baton_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
)

// The output a handler records is stored as its attempt completes: the
// last call of the attempt wins; a failed attempt stores none; an output
// over MaxOutputLen is refused and the earlier call's stands; a run again
// (JobAgain) stores its own; and a handler's middleware may record too.
func TestRecordOutput(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		var calls atomic.Int32
		c, _ := setup(t, baton.WorkFunc[emailArgs](func(ctx context.Context, job *baton.Job[emailArgs]) error {
			switch job.Args.To {
			case "flaky":
				require.NoError(t, baton.RecordOutput(ctx, fmt.Sprintf("from attempt %d", job.Attempt)))
				if job.Attempt == 1 {
					return errors.New("flaky")
				}
			case "big":
				require.NoError(t, baton.RecordOutput(ctx, map[string]int{"rows": 7}))
				err := baton.RecordOutput(ctx, strings.Repeat("x", baton.MaxOutputLen))
				require.ErrorContains(t, err, "over MaxOutputLen")
			case "again":
				if calls.Add(1) == 1 {
					require.NoError(t, baton.RecordOutput(ctx, "run 0"))
					return baton.JobAgain()
				}
			case "bad":
				require.ErrorContains(t, baton.RecordOutput(ctx, func() {}), "unsupported type")
			}
			return nil
		}), &baton.Config{
			Backoff: func(int) time.Duration { return time.Millisecond },
			WorkerMiddleware: []baton.WorkerMiddleware{func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
				err := next(ctx)
				if strings.Contains(string(job.Args), "middleware") {
					return errors.Join(err, baton.RecordOutput(ctx, "from the middleware"))
				}
				return err
			}},
		})
		start(t, c)
		want := map[string]string{
			"flaky":      `"from attempt 2"`,
			"big":        `{"rows":7}`,
			"again":      `"run 0"`, // its second run records none
			"bad":        "",
			"middleware": `"from the middleware"`,
		}
		for to, out := range want {
			res, err := c.Insert(context.Background(), emailArgs{To: to}, nil)
			require.NoError(t, err)
			row := waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
			require.Equal(t, out, string(row.Output), to)
			rows, _, err := c.JobList(context.Background(), "default", baton.JobStateCompleted, nil)
			require.NoError(t, err)
			for _, r := range rows {
				if r.ID == row.ID {
					require.Equal(t, out, string(r.Output), "JobList: %s", to)
				}
			}
		}
		require.ErrorIs(t, baton.RecordOutput(context.Background(), 1), baton.ErrNoAttempt)
	})
}

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
)

// listCounter is a memory backend that counts its QueueList calls.
type listCounter struct {
	batondriver.JobDriver
	lists atomic.Int64
}

func (d *listCounter) QueueList(ctx context.Context) ([]string, error) {
	d.lists.Add(1)
	return d.JobDriver.QueueList(ctx)
}

// TestEachJobListsQueuesOnce: `jobs retry|delete ID...` and `dead retry
// ID...` list the queues once for all their IDs, with -q or without, and
// still find each job in its queue.
func TestEachJobListsQueuesOnce(t *testing.T) {
	t.Parallel()
	for _, queue := range []string{"", "mail"} {
		t.Run("q="+queue, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			d := &listCounter{JobDriver: batonmem.New()}
			c, err := baton.NewClient(d, &baton.Config{AllowUnknownKinds: true, Logger: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			var ids []string
			for range 3 {
				res, err := c.Insert(ctx, email{To: "a@x"}, &baton.InsertOpts{Queue: "mail"})
				require.NoError(t, err)
				ids = append(ids, res.Job.ID)
			}
			_, err = c.Insert(ctx, email{To: "b@x"}, nil) // another queue
			require.NoError(t, err)

			var stdout bytes.Buffer
			a := &app{stdout: &stdout, stderr: io.Discard}
			before := d.lists.Load()
			err = a.eachJob(ctx, &backend{client: c}, queue, append(ids, "NOSUCHJOB"), "deleted", deleteJob)
			var ee *exitError
			require.True(t, errors.As(err, &ee), "%v", err)
			require.Equal(t, exitNotFound, ee.code)
			require.Contains(t, ee.err.Error(), "1 of 4 jobs not deleted: job NOSUCHJOB not found in")
			require.Equal(t, int64(1), d.lists.Load()-before, "QueueList calls")
			for _, id := range ids {
				require.Contains(t, stdout.String(), "deleted "+id+"\n")
			}
		})
	}
}

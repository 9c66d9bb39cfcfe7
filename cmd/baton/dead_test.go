package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// TestDeadSetSkipsJobsThatLeftIt: `dead purge` and `dead retry --all` read
// the dead set, then act on each job; a job retried meanwhile by someone
// else (the dashboard, another baton) has left the dead set and is left
// alone, not deleted while it waits to run.
func TestDeadSetSkipsJobsThatLeftIt(t *testing.T) {
	t.Parallel()
	f := setup(t, "")
	ctx := context.Background()
	var ids []string
	for _, to := range []string{"a@x", "b@x", "c@x"} {
		res, err := f.client.Insert(ctx, email{To: to}, &baton.InsertOpts{Queue: "mail"})
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	fetched, err := f.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "mail", Max: 3, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 3)
	var fin []*batondriver.JobFinish
	for _, j := range fetched.Jobs {
		fin = append(fin, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: batondriver.JobOutcomeDead, Error: "no"})
	}
	_, err = f.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: "mail", Finished: fin})
	require.NoError(t, err)

	b := &backend{client: f.client, driver: f.driver}
	first := true
	var retried string
	n, err := forDeadSet(ctx, b, "", func(j *baton.JobRow) error {
		if first {
			// Someone retries another dead job while the purge runs.
			first = false
			for _, id := range ids {
				if id != j.ID {
					retried = id
					break
				}
			}
			_, err := f.client.JobRetry(ctx, "mail", retried)
			require.NoError(t, err)
		}
		return f.client.JobDelete(ctx, j.Queue, j.ID)
	})
	require.NoError(t, err)
	require.Equal(t, 2, n, "the retried job is not counted")
	j, err := f.client.JobGet(ctx, "mail", retried)
	require.NoError(t, err, "the job retried during the purge was deleted")
	require.Equal(t, baton.JobStateAvailable, j.State)
}

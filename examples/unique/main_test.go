package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

// The test binary plays the worker process too: the program starts
// os.Args[0] again with BATON_CHILD=unique-worker.
func TestMain(m *testing.M) { redistest.Main(m, map[string]func() int{workerRole: worker}) }

// TestUnique runs seeds S4–S6's scenario on a private Redis with two OS
// processes: keys from the payload, a job kept alive through five lease
// TTLs, a worker killed with SIGKILL whose job comes back and completes, a
// twin that waits for the lock.
func TestUnique(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	var out bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"--redis", "redis://" + srv.Addr()}, &out), out.String())
	require.NotContains(t, out.String(), "FAILED")
	require.Contains(t, out.String(), "killed worker process")
	require.Contains(t, out.String(), "start rebuild orders by cron (attempt 2)")
	require.Contains(t, out.String(), "All guarantees held.")
}

func TestUniqueNeedsRedis(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, 2, run(t.Context(), nil, &out))
	require.Contains(t, out.String(), "needs its URL")
}

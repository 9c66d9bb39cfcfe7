package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/examples/internal/exampletest"
	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// TestPerUser runs seeds S1–S3's scenario on memory and on a private Redis,
// with a fast schedule: one sync per user at once, twins dropped, users in
// parallel, every event processed exactly once through JobAgain, each tick
// fanned out once by two clients.
func TestPerUser(t *testing.T) {
	t.Parallel()
	exampletest.OnBackends(t, run, []string{"--every", "250ms", "--ticks", "2"}, func(t *testing.T, out string) {
		require.Contains(t, out, "sync user 1 → dropped")
		require.Contains(t, out, "→ JobAgain")
	})
}

func TestPerUserFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, 2, run(t.Context(), []string{"--every", "1ms"}, &out))
	require.Contains(t, out.String(), "at least 10ms")
	require.Equal(t, 1, run(t.Context(), []string{"--redis", "redis://127.0.0.1:1"}, &out))
	require.Contains(t, out.String(), "cannot reach Redis")
}

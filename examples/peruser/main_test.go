package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// TestPerUser runs seeds S1–S3's scenario on memory and on a private Redis,
// with a fast schedule: one sync per user at once, twins dropped, users in
// parallel, every event processed exactly once through JobAgain, each tick
// fanned out once by two clients.
func TestPerUser(t *testing.T) {
	t.Parallel()
	for name, backend := range map[string]func(t *testing.T) []string{
		"memory": func(*testing.T) []string { return nil },
		"redis": func(t *testing.T) []string {
			return []string{"--redis", "redis://" + redistest.SharedServer(t).Addr()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			args := append([]string{"--every", "250ms", "--ticks", "2"}, backend(t)...)
			require.Equal(t, 0, run(t.Context(), args, &out), out.String())
			require.NotContains(t, out.String(), "FAILED")
			require.Contains(t, out.String(), "sync user 1 → dropped")
			require.Contains(t, out.String(), "→ JobAgain")
			require.Contains(t, out.String(), "All guarantees held.")
		})
	}
}

func TestPerUserFlags(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, 2, run(t.Context(), []string{"--every", "1ms"}, &out))
	require.Contains(t, out.String(), "at least 10ms")
	require.Equal(t, 1, run(t.Context(), []string{"--redis", "redis://127.0.0.1:1"}, &out))
	require.Contains(t, out.String(), "cannot reach Redis")
}

package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/examples/internal/exampletest"
	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// TestLockManager runs seed S8's scenario on memory and on a private Redis:
// TryDo without waiting, Do until released or timed out, a crashed holder
// passed after its TTL.
func TestLockManager(t *testing.T) {
	t.Parallel()
	exampletest.OnBackends(t, run, nil, nil)
}

func TestLockManagerBadRedis(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.Equal(t, 1, run(t.Context(), []string{"--redis", "http://nope"}, &out))
	require.Contains(t, out.String(), "bad --redis URL")
	require.Equal(t, 2, run(t.Context(), []string{"--nope"}, &out))
}

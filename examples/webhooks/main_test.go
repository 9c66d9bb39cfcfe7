package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/examples/internal/exampletest"
	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// TestWebhooks runs seeds S11–S14's scenario on memory and on a private
// Redis: 10 per customer, then 3, 20 and 0 (halted) set while running, then
// reset; no limit exceeded, no delivery lost or repeated.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	exampletest.OnBackends(t, run, nil, func(t *testing.T, out string) {
		require.Regexp(t, `acme 3, globex 20, initech 0 +3/3 +20/20 +0/0`, out)
	})
}

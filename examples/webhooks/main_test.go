package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// TestWebhooks runs seeds S11–S14's scenario on memory and on a private
// Redis: 10 per customer, then 3, 20 and 0 (halted) set while running, then
// reset; no limit exceeded, no delivery lost or repeated.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	for name, args := range map[string]func(t *testing.T) []string{
		"memory": func(*testing.T) []string { return nil },
		"redis": func(t *testing.T) []string {
			return []string{"--redis", "redis://" + redistest.SharedServer(t).Addr()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			require.Equal(t, 0, run(t.Context(), args(t), &out), out.String())
			require.NotContains(t, out.String(), "FAILED")
			require.Regexp(t, `acme 3, globex 20, initech 0 +3/3 +20/20 +0/0`, out.String())
			require.Contains(t, out.String(), "All guarantees held.")
		})
	}
}

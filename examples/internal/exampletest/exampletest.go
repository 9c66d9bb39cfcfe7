// Package exampletest runs the example programs' scenarios in their tests,
// on each backend.
package exampletest

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

// OnBackends runs the program's run function as a parallel subtest per
// backend — the in-memory one, and Redis (--redis) on the test binary's
// shared private server — with args before the backend's flags. Each must
// exit 0 with every guarantee held; check, if not nil, then looks at the
// output.
func OnBackends(t *testing.T, run func(context.Context, []string, io.Writer) int, args []string, check func(t *testing.T, out string)) {
	t.Helper()
	for name, flags := range map[string]func(t *testing.T) []string{
		"memory": func(*testing.T) []string { return nil },
		"redis": func(t *testing.T) []string {
			return []string{"--redis", "redis://" + redistest.SharedServer(t).Addr()}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			all := append(append([]string(nil), args...), flags(t)...)
			require.Equal(t, 0, run(t.Context(), all, &out), out.String())
			require.NotContains(t, out.String(), "FAILED")
			require.Contains(t, out.String(), "All guarantees held.")
			if check != nil {
				check(t, out.String())
			}
		})
	}
}

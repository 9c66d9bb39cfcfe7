package batonredis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// The job transitions must run as the function library, loaded on demand
// (and again after the server lost it), not silently as scripts.
func TestJobFunctionsLoaded(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	c := newClient(t, srv.Addr())
	d, err := New(c, &Config{Prefix: "t" + randomHex(6)})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx := context.Background()
	use := func() {
		_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: []*batondriver.JobInsert{
			{Kind: "k", Args: []byte(`{}`), MaxAttempts: 1},
		}})
		require.NoError(t, err)
		res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "q", Max: 1, LeaseTTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, res.Jobs, 1)
	}
	use()
	lib := d.scripts.jobLib.name
	require.False(t, d.scripts.jobLib.useEval.Load(), "fell back to scripts")
	list, err := c.Do(ctx, c.B().FunctionList().Libraryname(lib).Build()).ToArray()
	require.NoError(t, err)
	require.Len(t, list, 1, "library %s loaded", lib)

	// A server that lost its functions (restart without persistence) gets
	// them again on the next call.
	require.NoError(t, c.Do(ctx, c.B().FunctionFlush().Build()).Error())
	use()
	stats, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	require.NoError(t, err)
	require.Contains(t, stats, "cmdstat_fcall:")
	require.False(t, strings.Contains(stats, "cmdstat_eval:") || strings.Contains(stats, "cmdstat_evalsha:"),
		"no job transition ran as a script:\n%s", stats)
}

package batonredis

import (
	"context"
	"fmt"
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

// PruneFunctions deletes other Baton versions' libraries on every master,
// and nothing else: not this version's, not a library of another owner.
func TestPruneFunctions(t *testing.T) {
	t.Parallel()
	for name, addrs := range map[string]func() []string{
		"standalone": func() []string { return []string{redistest.StartT(t, nil).Addr()} },
		"cluster":    func() []string { return redistest.SharedCluster(t).Addrs() },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, addrs()...)
			d := newDriver(t, c)
			ctx := context.Background()
			// This version's library, loaded by a first job call.
			_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: []*batondriver.JobInsert{
				{Kind: "k", Args: []byte(`{}`), MaxAttempts: 1},
			}})
			require.NoError(t, err)
			old, other := "baton_"+randomHex(6), "baton_mine_"+randomHex(4)
			for _, lib := range []string{old, other} {
				code := fmt.Sprintf("#!lua name=%s\nredis.register_function('%s_f', function() return 1 end)", lib, lib)
				for _, node := range c.Nodes() {
					require.NoError(t, node.Do(ctx, node.B().FunctionLoad().FunctionCode(code).Build()).Error())
				}
			}
			t.Cleanup(func() {
				for _, node := range c.Nodes() {
					_ = node.Do(context.Background(), node.B().FunctionDelete().LibraryName(other).Build()).Error()
				}
			})
			deleted, err := d.PruneFunctions(ctx)
			require.NoError(t, err)
			require.Equal(t, []string{old}, deleted)
			for addr, node := range c.Nodes() {
				for lib, want := range map[string]int{old: 0, other: 1, d.scripts.jobLib.name: 1} {
					list, err := node.Do(ctx, node.B().FunctionList().Libraryname(lib).Build()).ToArray()
					require.NoError(t, err)
					require.Len(t, list, want, "%s on %s", lib, addr)
				}
			}
			deleted, err = d.PruneFunctions(ctx)
			require.NoError(t, err)
			require.Empty(t, deleted)
			// This version's calls go on.
			res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "q", Max: 1, LeaseTTL: time.Minute})
			require.NoError(t, err)
			require.Len(t, res.Jobs, 1)
		})
	}
}

// A server without functions (Redis < 7 answers FCALL and FUNCTION with
// "unknown command"; here they are renamed away) runs the transitions as
// scripts, from the first call on.
func TestJobScriptsWithoutFunctions(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, &redistest.Options{Args: []string{"--rename-command", "FCALL", "", "--rename-command", "FUNCTION", ""}})
	c := newClient(t, srv.Addr())
	d := newDriver(t, c)
	ctx := context.Background()
	for range 2 { // the first insert into a queue is pipelined with its registration
		_, err := d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "q", Jobs: []*batondriver.JobInsert{
			{Kind: "k", Args: []byte(`{}`), MaxAttempts: 1},
		}})
		require.NoError(t, err)
	}
	res, err := d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "q", Max: 2, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 2)
	require.True(t, d.scripts.jobLib.useEval.Load(), "did not fall back to scripts")
	queues, err := d.QueueList(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"q"}, queues)

	// That is the server's fact, not the process's: a driver on a server
	// with functions still uses them.
	other := newDriver(t, newClient(t, redistest.StartT(t, nil).Addr()))
	_, err = other.QueueStats(ctx, &batondriver.QueueParams{Queue: "q"})
	require.NoError(t, err)
	require.False(t, other.scripts.jobLib.useEval.Load(), "one server without functions made every driver use scripts")
}

// A server that refuses FUNCTION LOAD for a passing reason (here out of
// memory; also BUSY, LOADING) runs that call as a script, and the library
// is loaded once the server takes it: only a server that cannot take the
// library makes the driver use scripts for good.
func TestJobFunctionsAfterTransientLoadError(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	c := newClient(t, srv.Addr())
	d := newDriver(t, c)
	ctx := context.Background()
	require.NoError(t, c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "1").Build()).Error())
	_, err := d.QueueStats(ctx, &batondriver.QueueParams{Queue: "q"})
	require.NoError(t, err, "a read-only transition runs as a script")
	require.NoError(t, c.Do(ctx, c.B().ConfigSet().ParameterValue().ParameterValue("maxmemory", "0").Build()).Error())

	_, err = d.QueueStats(ctx, &batondriver.QueueParams{Queue: "q"})
	require.NoError(t, err)
	require.False(t, d.scripts.jobLib.useEval.Load(), "fell back to scripts for good")
	list, err := c.Do(ctx, c.B().FunctionList().Libraryname(d.scripts.jobLib.name).Build()).ToArray()
	require.NoError(t, err)
	require.Len(t, list, 1, "library loaded")
}

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

// testDemo is TestCLI's demo subtest: `make demo` runs `baton demo`, and CI
// checks its exit status. Scaled down ten times it takes about 2 seconds.
func testDemo(t *testing.T, bin string) {
	r := cli(t, bin, nil, "demo", "--scale", "0.1")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "Baton demo on the embedded in-memory backend")
	require.Contains(t, r.stdout, "All 6 guarantees held.")
	require.NotContains(t, r.stdout, "\x1b[", "not a terminal: plain output")
	require.Empty(t, r.stderr)

	// A broken guarantee fails the run, with exit code 1 and nothing more
	// on stderr than the FAIL line on stdout.
	r = cli(t, bin, nil, "demo", "--scale", "0.1", "--sabotage", "retry")
	require.Equal(t, exitFailed, r.code, r.stdout)
	require.Contains(t, r.stdout, "FAIL  the fail-twice job succeeded on its 3rd attempt")
	require.Empty(t, r.stderr)

	// On Redis, under a prefix of its own, removed at the end.
	addr := redistest.SharedServer(t).Addr()
	r = cli(t, bin, nil, "demo", "--scale", "0.1", "--redis", "redis://"+addr)
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "Baton demo on Redis at redis://"+addr+" (key prefix baton-demo-")
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	require.NoError(t, err)
	defer client.Close()
	keys, err := client.Do(context.Background(), client.B().Keys().Pattern("baton-demo-*").Build()).AsStrSlice()
	require.NoError(t, err)
	require.Empty(t, keys, "the demo's keys are removed")

	r = cli(t, bin, nil, "demo", "locks")
	require.Equal(t, exitOK, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Contains(t, r.stdout, "Baton lock demo on the embedded in-memory backend")
	require.Contains(t, r.stdout, "All guarantees held.")
}

func TestDemoBadRedis(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	require.Equal(t, 1, run(context.Background(), []string{"demo", "--redis", "http://nope"}, &out, &errOut))
	require.Contains(t, errOut.String(), "bad --redis URL")
	errOut.Reset()
	// Port 1 on loopback refuses connections.
	require.Equal(t, 1, run(context.Background(), []string{"demo", "--redis", "redis://127.0.0.1:1"}, &out, &errOut))
	require.Contains(t, errOut.String(), "cannot reach Redis")
	errOut.Reset()
	require.Equal(t, 1, run(context.Background(), []string{"demo", "locks", "--redis", "redis://127.0.0.1:1"}, &out, &errOut))
	require.Contains(t, errOut.String(), "cannot reach Redis")
}

func TestDemoFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--bogus"},
		{"demo", "stray"},
		{"demo", "--dash", "nope"},      // not an address: a stray argument
		{"demo", "--dash=nope"},         // not host:port
		{"demo", "locks", "--dash"},     // the lock demo has no dashboard
		{"demo", "--scale", "-1"},       // out of range
		{"demo", "--scale", "NaN"},      // not a number
		{"demo", "--sabotage", "bogus"}, // unknown
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		if strings.HasPrefix(args[1], "--scale") || strings.HasPrefix(args[1], "--sabotage") {
			require.Equal(t, exitFailed, code, "%v: %s", args, errOut.String())
		} else {
			require.Equal(t, exitUsage, code, "%v: %s", args, errOut.String())
		}
		require.Contains(t, errOut.String(), "baton demo: ", args)
	}
	var out, errOut bytes.Buffer
	require.Equal(t, exitOK, run(context.Background(), []string{"demo", "--help"}, &out, &errOut))
	require.Contains(t, out.String(), "baton demo locks [--redis URL]")
	require.NotContains(t, out.String(), "scale", "a flag for tests")
	out.Reset()
	require.Equal(t, exitOK, run(context.Background(), []string{"help", "demo"}, &out, &errOut))
	require.Contains(t, out.String(), "--dash [ADDR]")
}

func TestDashValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want []string }{
		{[]string{"--dash"}, []string{"--dash"}},
		{[]string{"--dash", "127.0.0.1:8080"}, []string{"--dash=127.0.0.1:8080"}},
		{[]string{"--dash", ":8080", "--no-color"}, []string{"--dash=:8080", "--no-color"}},
		{[]string{"--dash", "--no-color"}, []string{"--dash", "--no-color"}},
		{[]string{"-dash", "localhost:0"}, []string{"-dash=localhost:0"}},
		{[]string{"--", "--dash", "x:1"}, []string{"--", "--dash", "x:1"}},
	} {
		require.Equal(t, tc.want, dashValue(tc.in), "%v", tc.in)
	}
	var d dashFlag
	require.NoError(t, d.Set("true"))
	require.Equal(t, defaultDash, d.addr)
}

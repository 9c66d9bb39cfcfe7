package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testDash serves the dashboard from the built binary, reads a page that
// shows the seeded queues, and checks the refusals: no credentials off
// loopback, half the credentials, a bad address.
func testDash(t *testing.T, bin string) {
	f := seeded(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dash", "--redis", f.redis, "--prefix", f.prefix, "--addr", "127.0.0.1:0")
	cmd.Env = os.Environ()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "(read-only)")
	url := strings.Fields(line[strings.Index(line, "http://"):])[0]

	res, err := http.Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "mail", "the overview lists the seeded queue")

	// The refusals are bad usage, found before connecting: the same with
	// a Redis that cannot be reached.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "redis://" + l.Addr().String()
	require.NoError(t, l.Close())
	for _, redis := range []string{f.redis, closed} {
		for _, c := range []struct {
			env  []string
			args []string
			want string
		}{
			{nil, []string{"--addr", "0.0.0.0:0"}, "loopback only"},
			{[]string{"BATON_DASH_USER=u"}, []string{"--addr", "127.0.0.1:0"}, "set both"},
			{[]string{"BATON_DASH_PASSWORD=p"}, []string{"--addr", "127.0.0.1:0"}, "set both"},
			{nil, []string{"--addr", "nope"}, "bad --addr"},
		} {
			r := cli(t, bin, c.env, append([]string{"dash", "--redis", redis}, c.args...)...)
			require.Equal(t, exitUsage, r.code, "%s %v: %s", redis, c.args, r.stderr)
			require.Contains(t, r.stderr, c.want)
			require.Empty(t, r.stdout)
		}
	}
	// With good flags, an unreachable Redis is exit code 4 as for any
	// command, and nothing is served.
	r := cli(t, bin, nil, "dash", "--redis", closed, "--addr", "127.0.0.1:0")
	require.Equal(t, exitUnreachable, r.code, r.stderr)
	require.Empty(t, r.stdout)

	// --json errors are JSON too.
	r = cli(t, bin, nil, "dash", "--redis", closed, "--addr", "nope", "--json")
	require.Equal(t, exitUsage, r.code)
	require.JSONEq(t, `{"error": "baton dash: bad --addr \"nope\": want host:port, e.g. 127.0.0.1:8080", "exit_code": 2}`, r.stderr)
}

// testDashJSON: with --json, dash prints where it serves as one JSON
// object, as every other command prints its output, and then serves.
func testDashJSON(t *testing.T, bin string) {
	f := seeded(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dash", "--redis", f.redis, "--prefix", f.prefix, "--addr", "127.0.0.1:0", "--writable", "--json")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var d dashOut
	require.NoError(t, json.NewDecoder(out).Decode(&d))
	require.True(t, d.Writable)
	require.True(t, strings.HasPrefix(d.URL, "http://127.0.0.1:"), d.URL)
	require.True(t, strings.HasSuffix(d.URL, "/"), d.URL)

	res, err := http.Get(d.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, string(body), "mail", "the overview lists the seeded queue")
}

package main

import (
	"bufio"
	"context"
	"io"
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

	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--addr", "0.0.0.0:0"}, "loopback only"},
		{[]string{"BATON_DASH_USER=u"}, []string{"--addr", "127.0.0.1:0"}, "set both"},
		{nil, []string{"--addr", "nope"}, "bad --addr"},
	} {
		r := cli(t, bin, c.env, append([]string{"dash", "--redis", f.redis}, c.args...)...)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, c.want)
	}
}

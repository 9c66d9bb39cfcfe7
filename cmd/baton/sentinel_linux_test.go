package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/internal/redistest"
)

func init() { platformTests["Sentinel"] = testSentinel }

// testSentinel runs baton through a Sentinel (redis-server --sentinel, a
// child of this test, monitoring a master of its own) with
// ?master_set=. redistest starts no sentinels, hence the process handling
// here; Pdeathsig, Linux only, kills it if the test process dies.
func testSentinel(t *testing.T, bin string) {
	master := redistest.StartT(t, nil)
	f := seed(newFixture(t, bin, "", master.Addr()))

	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil,
		"port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\n",
		port, dir, master.Port()), 0o600))
	log, err := os.Create(filepath.Join(dir, "sentinel.log"))
	require.NoError(t, err)
	defer log.Close()
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			_ = c.Close()
			break
		}
		select {
		case <-ctx.Done():
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("sentinel on %s did not start: %v\n%s", addr, err, b)
		case <-time.After(20 * time.Millisecond):
		}
	}

	f.redis = "redis://" + addr + "?master_set=mymaster"
	var s statsOut
	f.runJSON(&s, "stats")
	require.Equal(t, 2, s.Queues)
	require.Equal(t, 1, s.Dead)

	f.redis = "redis://" + addr + "?master_set=nosuchmaster"
	r := f.run("stats")
	require.Equal(t, exitUnreachable, r.code, r.stderr)
}

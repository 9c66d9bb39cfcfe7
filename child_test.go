package baton_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonredis"
)

// Child processes: TestMain runs the role named by BATON_CHILD (children);
// a child reaches Redis at BATON_REDIS_ADDR (one address, or a Cluster's
// node addresses comma-separated) under key prefix BATON_PREFIX,
// logs what it does to BATON_LOG, prints "ready" when it works, and runs
// until killed.

// startChild starts this test binary as a child in role, and waits until it
// is ready.
func startChild(t *testing.T, role, addr, prefix, logPath string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "BATON_CHILD="+role, "BATON_REDIS_ADDR="+addr, "BATON_PREFIX="+prefix, "BATON_LOG="+logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "%s child did not start", role)
	require.Equal(t, "ready\n", line)
	return cmd
}

// childSetup is the start of a child: its Redis driver and its log, opened
// for appending with write(2), so that a SIGKILL loses nothing logged.
func childSetup() (*batonredis.Driver, *os.File, error) {
	f, err := os.OpenFile(os.Getenv("BATON_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: strings.Split(os.Getenv("BATON_REDIS_ADDR"), ",")})
	if err != nil {
		return nil, nil, err
	}
	d, err := batonredis.New(client, &batonredis.Config{Prefix: os.Getenv("BATON_PREFIX")})
	return d, f, err
}

// childFailed reports a child's start-up error and returns its exit code.
func childFailed(err error) int {
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// childServe starts c, the client NewClient returned with err, says
// "ready" and works until the child is killed; it returns an exit code
// only if c could not be made or started.
func childServe(c *baton.Client, err error) int {
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		return childFailed(err)
	}
	fmt.Println("ready")
	select {} // until killed
}

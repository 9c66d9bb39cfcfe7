package redistest

import (
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	code := m.Run()
	CloseShared()
	os.Exit(code)
}

func ping(addr string) error {
	reply, err := do(addr, 200*time.Millisecond, "PING")
	if err == nil && reply != "PONG" {
		err = errors.New("unexpected PING reply " + reply)
	}
	return err
}

func TestStartKillRestart(t *testing.T) {
	t.Parallel()
	s := StartT(t, &Options{Args: []string{"--maxmemory", "10mb"}})
	require.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())
	require.NoError(t, ping(s.Addr()))

	require.NoError(t, s.Kill())
	require.NoError(t, s.Kill(), "Kill is idempotent")
	require.Error(t, ping(s.Addr()))

	port := s.Port()
	require.NoError(t, s.Restart())
	require.Equal(t, port, s.Port())
	require.NoError(t, ping(s.Addr()))
	info, err := do(s.Addr(), time.Second, "INFO", "memory")
	require.NoError(t, err)
	require.Contains(t, info, "maxmemory:10485760\r\n", "Args survive Restart")

	require.NoError(t, s.Restart(), "Restart while running")
	require.NoError(t, ping(s.Addr()))

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	require.Error(t, ping(s.Addr()))
	require.Error(t, s.Restart())
}

func TestPauseResume(t *testing.T) {
	t.Parallel()
	s := StartT(t, nil)
	require.NoError(t, s.Pause())
	err := ping(s.Addr())
	var nerr net.Error
	require.ErrorAs(t, err, &nerr)
	require.True(t, nerr.Timeout(), "paused server must time out, got %v", err)

	require.NoError(t, s.Resume())
	require.NoError(t, ping(s.Addr()))

	require.NoError(t, s.Pause())
	require.NoError(t, s.Close(), "Close resumes and kills a paused server")
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	s := StartT(t, nil)
	_, err := Start(&Options{Port: s.Port()})
	require.ErrorContains(t, err, "Address already in use")
	require.NoError(t, ping(s.Addr()), "the existing server is untouched")

	_, err = Start(&Options{Args: []string{"--no-such-directive", "x"}})
	require.ErrorContains(t, err, "no-such-directive")

	_, err = StartCluster(2)
	require.Error(t, err)
}

func TestCluster(t *testing.T) {
	t.Parallel()
	c := StartClusterT(t)
	require.Len(t, c.Addrs(), 3)
	require.Len(t, c.Nodes(), 3)
	for _, addr := range c.Addrs() {
		info, err := do(addr, time.Second, "CLUSTER", "INFO")
		require.NoError(t, err)
		require.Contains(t, info, "cluster_state:ok\r\n")
		require.Contains(t, info, "cluster_slots_assigned:16384\r\n")
	}
}

func TestShared(t *testing.T) {
	t.Parallel()
	s := SharedServer(t)
	require.Same(t, s, SharedServer(t))
	require.NoError(t, ping(s.Addr()))

	c := SharedCluster(t)
	require.Same(t, c, SharedCluster(t))
	for _, addr := range c.Addrs() {
		require.NoError(t, ping(addr))
	}
}

// Not parallel: t.Setenv.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	const want = "redis-server not found on PATH: Baton's tests need a real Redis 7; install it (Debian/Ubuntu: apt-get install -y redis-server)"
	_, err := Start(nil)
	require.EqualError(t, err, want)
	_, err = StartCluster(3)
	require.EqualError(t, err, want)
}

func TestReplica(t *testing.T) {
	t.Parallel()
	m := StartT(t, nil)
	_, err := do(m.Addr(), time.Second, "SET", "k", "before")
	require.NoError(t, err)
	r := StartT(t, &Options{ReplicaOf: m.Addr()})
	got, err := do(r.Addr(), time.Second, "GET", "k")
	require.NoError(t, err)
	require.Equal(t, "before", got, "Start returns once the replica has the master's data")
	_, err = do(r.Addr(), time.Second, "SET", "k", "x")
	require.ErrorContains(t, err, "READONLY")
	_, err = do(m.Addr(), time.Second, "SET", "k", "after")
	require.NoError(t, err)
	require.NoError(t, r.Synced())
	got, err = do(r.Addr(), time.Second, "GET", "k")
	require.NoError(t, err)
	require.Equal(t, "after", got, "Synced returns once the replica has the master's writes")
	require.Error(t, m.Synced(), "not a replica")

	_, err = Start(&Options{ReplicaOf: "no-port"})
	require.Error(t, err)
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	m := StartT(t, nil)
	r := StartT(t, &Options{ReplicaOf: m.Addr()})
	s := StartSentinelT(t, m, 1)
	addr, err := s.SentinelMaster()
	require.NoError(t, err)
	require.Equal(t, m.Addr(), addr)
	_, err = do(m.Addr(), time.Second, "SET", "k", "v")
	require.NoError(t, err)
	require.NoError(t, r.Synced())

	require.NoError(t, m.Kill())
	killed := time.Now()
	require.Eventually(t, func() bool {
		addr, err = s.SentinelMaster()
		return err == nil && addr == r.Addr()
	}, 10*time.Second, 10*time.Millisecond, "no failover to %s: sentinel names %s (%v)", r.Addr(), addr, err)
	t.Logf("failover %v after the kill", time.Since(killed))
	role, err := doAll(r.Addr(), time.Second, "ROLE")
	require.NoError(t, err)
	require.Equal(t, "master", role[0])
	got, err := do(r.Addr(), time.Second, "GET", "k")
	require.NoError(t, err)
	require.Equal(t, "v", got)
}

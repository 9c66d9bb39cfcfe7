package redistest

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
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

// TestClusterReplicas starts a Cluster with a replica per master and fails
// two masters over: one killed, one by CLUSTER FAILOVER; then it moves a
// slot. What each master had sent its replica survives.
func TestClusterReplicas(t *testing.T) {
	t.Parallel()
	c := StartClusterOptsT(t, &ClusterOptions{Replicas: true, NodeTimeout: time.Second})
	require.Len(t, c.Nodes(), 6)
	require.Len(t, c.Addrs(), 6)
	set := func(key, value string) (*Server, int) {
		t.Helper()
		slot, err := c.Slot(key)
		require.NoError(t, err)
		m, err := c.Master(slot)
		require.NoError(t, err)
		_, err = do(m.Addr(), time.Second, "SET", key, value)
		require.NoError(t, err)
		return m, slot
	}
	get := func(s *Server, key string) string {
		t.Helper()
		v, err := do(s.Addr(), time.Second, "GET", key)
		require.NoError(t, err)
		return v
	}
	for i, m := range c.Nodes()[:3] {
		r, err := c.Replica(m)
		require.NoError(t, err)
		require.Same(t, c.Nodes()[3+i], r)
	}

	// Killed: its replica takes over what it had replicated.
	m, slot := set("{a}k", "a")
	r, err := c.Replica(m)
	require.NoError(t, err)
	require.NoError(t, r.Synced())
	started := time.Now()
	promoted, err := c.Failover(m)
	require.NoError(t, err)
	t.Logf("failover after a kill: %v", time.Since(started))
	require.Same(t, r, promoted)
	owner, err := c.Master(slot)
	require.NoError(t, err)
	require.Same(t, r, owner)
	require.Equal(t, "a", get(r, "{a}k"))
	_, err = c.Replica(r)
	require.Error(t, err, "the killed master is no replica of the promoted one")

	// Manual: the replica takes over, the master becomes its replica.
	m, slot = set("{b}k", "b")
	require.NotSame(t, r, m)
	r, err = c.Replica(m)
	require.NoError(t, err)
	started = time.Now()
	require.NoError(t, c.ManualFailover(r))
	t.Logf("manual failover: %v", time.Since(started))
	owner, err = c.Master(slot)
	require.NoError(t, err)
	require.Same(t, r, owner)
	require.Equal(t, "b", get(r, "{b}k"), "CLUSTER FAILOVER loses no write")
	back, err := c.Replica(r)
	require.NoError(t, err)
	require.Same(t, m, back, "the old master replicates the new one")
	require.NoError(t, m.Synced())
	require.Error(t, r.Synced(), "a master")

	// A slot moved, in batches, to another master.
	m, slot = set("{c}0", "0")
	for i := 1; i < 25; i++ {
		set("{c}"+strconv.Itoa(i), strconv.Itoa(i))
	}
	var to *Server // another master: one of these slots' masters
	for _, s := range []int{0, clusterSlots / 2, clusterSlots - 1} {
		o, err := c.Master(s)
		require.NoError(t, err)
		if o != m {
			to = o
		}
	}
	require.NotSame(t, m, to)
	moved, err := c.MigrateSlot(slot, to, &MigrateOptions{Batch: 10})
	require.NoError(t, err)
	require.Equal(t, 25, moved)
	owner, err = c.Master(slot)
	require.NoError(t, err)
	require.Same(t, to, owner)
	for i := range 25 {
		require.Equal(t, strconv.Itoa(i), get(to, "{c}"+strconv.Itoa(i)))
	}
	_, err = do(m.Addr(), time.Second, "GET", "{c}0")
	require.ErrorContains(t, err, "MOVED")
	_, err = c.MigrateSlot(slot, to, nil)
	require.Error(t, err, "to serves it already")
}

// TestStallReplication: what a master acknowledges after StallReplication
// never reaches its replica if the master dies before the replica resumes;
// what it acknowledged before does. (With Pause alone instead, the write
// waits in the kernel's socket buffers and reaches the replica: the test
// fails so.)
func TestStallReplication(t *testing.T) {
	t.Parallel()
	m := StartT(t, nil)
	r := StartT(t, &Options{ReplicaOf: m.Addr()})
	_, err := do(m.Addr(), time.Second, "SET", "before", "1")
	require.NoError(t, err)
	require.NoError(t, r.Synced())
	require.NoError(t, r.StallReplication())
	_, err = do(m.Addr(), time.Second, "SET", "after", "1")
	require.NoError(t, err)
	require.NoError(t, m.Kill())
	require.NoError(t, r.Resume())
	// The replica reads what the kernel held, then finds the link closed.
	require.Eventually(t, func() bool {
		info, err := do(r.Addr(), time.Second, "INFO", "replication")
		return err == nil && strings.Contains(info, "master_link_status:down\r\n")
	}, 10*time.Second, 10*time.Millisecond)
	got, err := do(r.Addr(), time.Second, "GET", "before")
	require.NoError(t, err)
	require.Equal(t, "1", got)
	got, err = do(r.Addr(), time.Second, "GET", "after")
	require.NoError(t, err)
	require.Empty(t, got, "a write acknowledged after the stall reached the replica")
	require.Error(t, m.StallReplication(), "no replica")
}

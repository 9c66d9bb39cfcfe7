package redistest

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterOptions configures StartClusterOpts. The zero value is what
// StartCluster(3) starts.
type ClusterOptions struct {
	// Masters is the number of masters, at least 3. Default 3.
	Masters int
	// Replicas gives each master one replica, so that killing a master
	// (Failover) or CLUSTER FAILOVER (ManualFailover) promotes it. Default
	// false: masters only.
	Replicas bool
	// NodeTimeout is every node's cluster-node-timeout: how long a master
	// may go unanswered before the others mark it failed and its replica
	// takes over, about a second or two later. Default 5s; failover tests
	// want 1-2s, so that a failover takes a few seconds, not ten.
	NodeTimeout time.Duration
}

// Cluster is a set of redis-server cluster nodes with all 16384 slots
// assigned to its masters and, if started with replicas, one replica of
// each master. Its methods are safe for concurrent use.
type Cluster struct {
	masters  []*Server // in start order
	replicas []*Server // replicas[i] was started as masters[i]'s replica
}

// StartCluster starts masters (>= 3) cluster-enabled nodes, assigns the hash
// slots evenly with CLUSTER ADDSLOTSRANGE, joins them with CLUSTER MEET and
// waits (up to 30s) until every node reports cluster_state:ok and sees all
// slots covered and all nodes known. On any failure it stops the nodes it
// started and returns an error (for a timeout, including each node's
// CLUSTER INFO). The caller must Close the Cluster.
func StartCluster(masters int) (*Cluster, error) {
	return StartClusterOpts(&ClusterOptions{Masters: masters})
}

// StartClusterOpts is StartCluster with options; a nil *ClusterOptions is
// StartCluster(3). With Replicas it also makes one node more per master
// that master's replica (CLUSTER REPLICATE) and waits, within the same 30s,
// until every replica's link to its master is up (it holds the master's
// data) and every node knows every other.
func StartClusterOpts(opts *ClusterOptions) (*Cluster, error) {
	if opts == nil {
		opts = &ClusterOptions{}
	}
	masters := cmp.Or(opts.Masters, 3)
	if masters < 3 {
		return nil, fmt.Errorf("redistest: StartCluster needs at least 3 masters, got %d", masters)
	}
	if opts.NodeTimeout < 0 {
		return nil, fmt.Errorf("redistest: negative NodeTimeout %v", opts.NodeTimeout)
	}
	c := &Cluster{}
	fail := func(err error) (*Cluster, error) { _ = c.Close(); return nil, err }
	nodeOpts := &Options{Cluster: true, ClusterNodeTimeout: opts.NodeTimeout}
	for range masters {
		s, err := Start(nodeOpts)
		if err != nil {
			return fail(err)
		}
		c.masters = append(c.masters, s)
	}
	if opts.Replicas {
		for range masters {
			s, err := Start(nodeOpts)
			if err != nil {
				return fail(err)
			}
			c.replicas = append(c.replicas, s)
		}
	}
	for i, s := range c.masters {
		lo, hi := i*clusterSlots/masters, (i+1)*clusterSlots/masters-1
		for _, cmd := range [][]string{
			{"CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i + 1)},
			{"CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)},
		} {
			if _, err := do(s.Addr(), time.Second, cmd...); err != nil {
				return fail(fmt.Errorf("redistest: %s on %s: %w", strings.Join(cmd, " "), s.Addr(), err))
			}
		}
	}
	for _, s := range c.Nodes()[1:] {
		if _, err := do(c.masters[0].Addr(), time.Second, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(s.port)); err != nil {
			return fail(fmt.Errorf("redistest: CLUSTER MEET %s: %w", s.Addr(), err))
		}
	}
	deadline := time.Now().Add(clusterTimeout)
	for i, r := range c.replicas {
		if err := c.replicate(r, c.masters[i], deadline); err != nil {
			return fail(err)
		}
	}
	if err := c.waitOk(deadline); err != nil {
		return fail(err)
	}
	return c, nil
}

// replicate makes r a replica of m, once r has heard of m, and waits until
// its link is up.
func (c *Cluster) replicate(r, m *Server, deadline time.Time) error {
	id, err := do(m.Addr(), time.Second, "CLUSTER", "MYID")
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER MYID on %s: %w", m.Addr(), err)
	}
	for {
		// "Unknown node" until the gossip of the MEETs reaches r.
		_, err := do(r.Addr(), time.Second, "CLUSTER", "REPLICATE", id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: CLUSTER REPLICATE on %s of %s: %w", r.Addr(), m.Addr(), err)
		}
		time.Sleep(pollInterval)
	}
	return r.waitLinkUp()
}

// waitOk polls until every running node reports cluster_state:ok, all
// slots covered and every node known, and every replica its link up. On
// timeout the error holds each node's CLUSTER INFO.
func (c *Cluster) waitOk(deadline time.Time) error {
	want := []string{"cluster_state:ok\r\n", "cluster_slots_assigned:16384\r\n",
		"cluster_slots_ok:16384\r\n", "cluster_known_nodes:" + strconv.Itoa(len(c.masters)+len(c.replicas)) + "\r\n"}
	for {
		var bad []string
		for _, s := range c.Nodes() {
			if !s.up() {
				continue
			}
			info, err := do(s.Addr(), time.Second, "CLUSTER", "INFO")
			if err == nil && containsAll(info, want) {
				repl, err := do(s.Addr(), time.Second, "INFO", "replication")
				if err == nil && (strings.Contains(repl, "role:master\r\n") || strings.Contains(repl, "master_link_status:up\r\n")) {
					continue
				}
				info += repl
			}
			bad = append(bad, fmt.Sprintf("%s: %v %q", s.Addr(), err, info))
		}
		if bad == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: cluster not ok after %v:\n%s", clusterTimeout, strings.Join(bad, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs returns the "127.0.0.1:PORT" address of every node, in the order
// of Nodes.
func (c *Cluster) Addrs() []string {
	nodes := c.Nodes()
	addrs := make([]string, len(nodes))
	for i, s := range nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// Nodes returns the cluster's servers: the masters in start order, then
// the replicas in the order of their masters, e.g. to Kill or Pause one.
// The order is the start's: after a failover a replica in it may be a
// master (Master, Replica say who is what now). The returned slice is a
// copy.
func (c *Cluster) Nodes() []*Server { return append(slices.Clip(c.masters), c.replicas...) }

// Close closes every node (see Server.Close) and returns the joined errors.
// It is idempotent.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.Nodes() {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string   // addr "127.0.0.1:PORT"
	flags    []string // myself, master, slave, fail?, fail, ...
	master   string   // a replica's master's id; "-" for a master
	slots    [][2]int // the ranges it serves, lo and hi included
}

func (n clusterNode) is(flag string) bool { return slices.Contains(n.flags, flag) }

// clusterNodes returns the cluster as the node at addr sees it.
func clusterNodes(addr string) ([]clusterNode, error) {
	text, err := do(addr, time.Second, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("redistest: CLUSTER NODES on %s: %w", addr, err)
	}
	var nodes []clusterNode
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		host, _, _ := strings.Cut(f[1], "@") // ip:port@cport[,hostname]
		n := clusterNode{id: f[0], addr: host, flags: strings.Split(f[2], ","), master: f[3]}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // [slot->-id] or [slot-<-id]: a migration
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			l, err1 := strconv.Atoi(lo)
			h, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redistest: CLUSTER NODES on %s: slots %q", addr, r)
			}
			n.slots = append(n.slots, [2]int{l, h})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// up reports whether s runs and is not paused.
func (s *Server) up() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running() && !s.paused
}

// server returns the cluster's server at addr.
func (c *Cluster) server(addr string) *Server {
	for _, s := range c.Nodes() {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// view returns the cluster as one of its running nodes sees it, and that
// node.
func (c *Cluster) view() ([]clusterNode, *Server, error) {
	var errs []error
	for _, s := range c.Nodes() {
		if !s.up() {
			continue
		}
		nodes, err := clusterNodes(s.Addr())
		if err == nil {
			return nodes, s, nil
		}
		errs = append(errs, err)
	}
	return nil, nil, fmt.Errorf("redistest: no cluster node answers: %w", errors.Join(errs...))
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT), which honours a
// hash tag: "q:{a}:x" and "{a}" share one.
func (c *Cluster) Slot(key string) (int, error) {
	_, s, err := c.view()
	if err != nil {
		return 0, err
	}
	reply, err := do(s.Addr(), time.Second, "CLUSTER", "KEYSLOT", key)
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT %q: %w", key, err)
	}
	return strconv.Atoi(reply)
}

// Master returns the master that serves slot, as a running node sees it.
func (c *Cluster) Master(slot int) (*Server, error) {
	nodes, _, err := c.view()
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		if !n.is("master") {
			continue
		}
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				if s := c.server(n.addr); s != nil {
					return s, nil
				}
				return nil, fmt.Errorf("redistest: slot %d is served by %s, no node of this cluster", slot, n.addr)
			}
		}
	}
	return nil, fmt.Errorf("redistest: slot %d is served by no master", slot)
}

// Replica returns a replica of master, as a running node sees it.
func (c *Cluster) Replica(master *Server) (*Server, error) {
	nodes, _, err := c.view()
	if err != nil {
		return nil, err
	}
	id := ""
	for _, n := range nodes {
		if n.addr == master.Addr() {
			id = n.id
		}
	}
	for _, n := range nodes {
		if n.is("slave") && n.master == id && id != "" && !n.is("fail") {
			if s := c.server(n.addr); s != nil {
				return s, nil
			}
		}
	}
	return nil, fmt.Errorf("redistest: %s has no replica", master.Addr())
}

// Failover kills master with SIGKILL (Server.Kill) and waits (up to 30s)
// until its replica has taken over: every running node names the replica
// the master of master's slots, reports cluster_state:ok and every slot
// served, and every replica's link is up. It returns the promoted replica.
// The killed master stays down; what it had not yet sent its replica is
// lost, as in any failover of asynchronous replication. The detection
// takes the cluster's NodeTimeout, the election a second or so more.
func (c *Cluster) Failover(master *Server) (*Server, error) {
	replica, err := c.Replica(master)
	if err != nil {
		return nil, err
	}
	if err := master.Kill(); err != nil {
		return nil, err
	}
	return replica, c.WaitFailover(replica, master)
}

// WaitFailover waits (up to 30s) until replica has taken over from master,
// killed by the caller (Failover kills and waits): every running node
// names replica the master of master's slots, reports cluster_state:ok
// and every slot served, and every replica's link is up.
func (c *Cluster) WaitFailover(replica, master *Server) error {
	return c.waitPromoted(replica, master)
}

// ManualFailover has replica take over from its master with CLUSTER
// FAILOVER (no force): the master stops its clients' writes, the replica
// catches up with its replication stream, then takes over, so that no
// acknowledged write is lost. It waits (up to 30s) until every node names
// replica the master of the slots and the old master has become its
// replica, its link up.
func (c *Cluster) ManualFailover(replica *Server) error {
	nodes, err := clusterNodes(replica.Addr())
	if err != nil {
		return err
	}
	var old *Server
	for _, n := range nodes {
		if n.is("myself") && n.is("slave") {
			for _, m := range nodes {
				if m.id == n.master {
					old = c.server(m.addr)
				}
			}
		}
	}
	if old == nil {
		return fmt.Errorf("redistest: ManualFailover: %s is no replica of this cluster's nodes", replica.Addr())
	}
	if _, err := do(replica.Addr(), time.Second, "CLUSTER", "FAILOVER"); err != nil {
		return fmt.Errorf("redistest: CLUSTER FAILOVER on %s: %w", replica.Addr(), err)
	}
	return c.waitPromoted(replica, old)
}

// waitPromoted polls until every running node names replica a master and
// old the master of no slot, then waits for the cluster to be ok.
func (c *Cluster) waitPromoted(replica, old *Server) error {
	deadline := time.Now().Add(clusterTimeout)
	for {
		promoted := true
		var last error
		for _, s := range c.Nodes() {
			if !s.up() {
				continue
			}
			nodes, err := clusterNodes(s.Addr())
			if err != nil {
				promoted, last = false, err
				continue
			}
			for _, n := range nodes {
				if (n.addr == replica.Addr() && !n.is("master")) || (n.addr == old.Addr() && len(n.slots) > 0) {
					promoted, last = false, fmt.Errorf("%s sees %s as %v serving %v", s.Addr(), n.addr, n.flags, n.slots)
				}
			}
		}
		if promoted {
			return c.waitOk(deadline)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s not promoted after %v: %v", replica.Addr(), clusterTimeout, last)
		}
		time.Sleep(pollInterval)
	}
}

// MigrateOptions configures MigrateSlot. A nil *MigrateOptions means all
// defaults.
type MigrateOptions struct {
	// Batch is how many keys one MIGRATE moves. Default 10.
	Batch int
	// Pause is how long MigrateSlot waits after each batch, so that a test
	// runs its commands against a slot half moved. Default 0.
	Pause time.Duration
	// Timeout bounds the whole migration. Default 30s.
	Timeout time.Duration
}

// MigrateSlot moves slot from the master that serves it to master to,
// with the steps of redis-cli --cluster reshard: CLUSTER SETSLOT IMPORTING
// on to, MIGRATING on the source, MIGRATE of the slot's keys in batches
// (CLUSTER GETKEYSINSLOT) until none is left, then CLUSTER SETSLOT NODE on
// to, the source and every other master. While the keys move, a command
// for a key already moved gets ASK on the source, and one whose keys are
// split between the nodes TRYAGAIN. It returns the number of keys moved
// and waits until every node sees to serve the slot.
func (c *Cluster) MigrateSlot(slot int, to *Server, opts *MigrateOptions) (int, error) {
	if opts == nil {
		opts = &MigrateOptions{}
	}
	batch := cmp.Or(opts.Batch, 10)
	deadline := time.Now().Add(cmp.Or(opts.Timeout, clusterTimeout))
	from, err := c.Master(slot)
	if err != nil {
		return 0, err
	}
	if from == to {
		return 0, fmt.Errorf("redistest: MigrateSlot: %s already serves slot %d", to.Addr(), slot)
	}
	fromID, err := do(from.Addr(), time.Second, "CLUSTER", "MYID")
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", from.Addr(), err)
	}
	toID, err := do(to.Addr(), time.Second, "CLUSTER", "MYID")
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER MYID on %s: %w", to.Addr(), err)
	}
	sl := strconv.Itoa(slot)
	for _, step := range []struct {
		on  *Server
		cmd []string
	}{
		{to, []string{"CLUSTER", "SETSLOT", sl, "IMPORTING", fromID}},
		{from, []string{"CLUSTER", "SETSLOT", sl, "MIGRATING", toID}},
	} {
		if _, err := do(step.on.Addr(), time.Second, step.cmd...); err != nil {
			return 0, fmt.Errorf("redistest: %s on %s: %w", strings.Join(step.cmd, " "), step.on.Addr(), err)
		}
	}
	moved := 0
	for {
		keys, err := doAll(from.Addr(), time.Second, "CLUSTER", "GETKEYSINSLOT", sl, strconv.Itoa(batch))
		if err != nil {
			return moved, fmt.Errorf("redistest: CLUSTER GETKEYSINSLOT %d on %s: %w", slot, from.Addr(), err)
		}
		if len(keys) == 0 {
			break
		}
		_, port, _ := net.SplitHostPort(to.Addr())
		cmd := append([]string{"MIGRATE", "127.0.0.1", port, "", "0", "5000", "KEYS"}, keys...)
		if _, err := do(from.Addr(), 10*time.Second, cmd...); err != nil {
			return moved, fmt.Errorf("redistest: MIGRATE of %d keys of slot %d from %s to %s: %w", len(keys), slot, from.Addr(), to.Addr(), err)
		}
		moved += len(keys)
		if time.Now().After(deadline) {
			return moved, fmt.Errorf("redistest: slot %d: keys still on %s after %d moved", slot, from.Addr(), moved)
		}
		time.Sleep(opts.Pause)
	}
	// The new owner first, so that it serves the slot before the source
	// redirects there (redis-cli's order); then every other master.
	owners := []*Server{to, from}
	for _, m := range c.Nodes() {
		if m != to && m != from && m.up() {
			if repl, err := do(m.Addr(), time.Second, "INFO", "replication"); err == nil && strings.Contains(repl, "role:master\r\n") {
				owners = append(owners, m)
			}
		}
	}
	for _, m := range owners {
		if _, err := do(m.Addr(), time.Second, "CLUSTER", "SETSLOT", sl, "NODE", toID); err != nil {
			return moved, fmt.Errorf("redistest: CLUSTER SETSLOT %d NODE on %s: %w", slot, m.Addr(), err)
		}
	}
	for {
		agree := true
		for _, s := range c.Nodes() {
			if !s.up() {
				continue
			}
			owner, err := ownerSeenBy(s.Addr(), slot)
			if err != nil || owner != to.Addr() {
				agree = false
			}
		}
		if agree {
			return moved, nil
		}
		if time.Now().After(deadline) {
			return moved, fmt.Errorf("redistest: slot %d moved to %s, not every node sees it yet", slot, to.Addr())
		}
		time.Sleep(pollInterval)
	}
}

// ownerSeenBy returns the address of the master that the node at addr sees
// serve slot.
func ownerSeenBy(addr string, slot int) (string, error) {
	nodes, err := clusterNodes(addr)
	if err != nil {
		return "", err
	}
	for _, n := range nodes {
		for _, r := range n.slots {
			if n.is("master") && r[0] <= slot && slot <= r[1] {
				return n.addr, nil
			}
		}
	}
	return "", fmt.Errorf("redistest: %s sees no master of slot %d", addr, slot)
}

// StartClusterT is StartCluster(3) for tests: it registers tb.Cleanup to
// Close the cluster and calls tb.Fatal with the error message on failure.
func StartClusterT(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := StartCluster(3)
	return closedWith(tb, c, err)
}

// StartClusterOptsT is StartClusterOpts for tests, as StartClusterT.
func StartClusterOptsT(tb testing.TB, opts *ClusterOptions) *Cluster {
	tb.Helper()
	c, err := StartClusterOpts(opts)
	return closedWith(tb, c, err)
}

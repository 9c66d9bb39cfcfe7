package redistest

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// MasterSet is the name under which a Sentinel started by StartSentinel
// monitors its master: rueidis's SentinelOption.MasterSet, a redis URL's
// master_set.
const MasterSet = "baton"

// SentinelDownAfter is how long a master may leave a Sentinel's pings
// unanswered before the Sentinel fails it over (down-after-milliseconds).
// Short, so that a test sees a failover within a second or two of killing
// a master; long enough that a master merely slowed by a loaded machine is
// not failed over.
const SentinelDownAfter = 500 * time.Millisecond

// sentinelFailoverTimeout is the Sentinel's failover-timeout. A failover
// that fails is tried again only after twice this, which no test waits
// for; and a Sentinel repoints a replica that replicates another address
// than the master's (a proxy in front of it) only this long after it found
// the replica, which no test must see.
const sentinelFailoverTimeout = time.Minute

// StartSentinel starts a Sentinel (redis-server --sentinel) on a free
// loopback port, monitoring master as MasterSet with a quorum of 1, so that
// it fails the master over on its own: SentinelDownAfter after the master
// stops answering, it promotes a replica, usually within another second.
// It polls its master and replicas every 100ms rather than every 10s and
// never enters TILT mode, so that a loaded machine cannot keep it from
// acting. It waits (up to 10s) until the Sentinel sees the master and
// replicas of its replicas (start them first, with Options.ReplicaOf)
// connected. The returned Server is the Sentinel: Addr is what a client
// connects to; Kill, Pause and Close work as for a server. The caller must
// Close it.
func StartSentinel(master *Server, replicas int) (*Server, error) {
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 1\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n",
		MasterSet, master.Port(), SentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	s, err := start(&Options{}, conf)
	if err != nil {
		return nil, err
	}
	// SENTINEL DEBUG (Redis 7): the periods are not configuration.
	if _, err := doAll(s.Addr(), time.Second, "SENTINEL", "DEBUG", "INFO-PERIOD", "100", "TILT-TRIGGER", "3600000"); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("redistest: sentinel %s: SENTINEL DEBUG: %w", s.Addr(), err)
	}
	if err := s.waitReplicas(replicas); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// waitReplicas polls until a Sentinel sees its master up and n replicas
// connected and up.
func (s *Server) waitReplicas(n int) error {
	deadline := time.Now().Add(startTimeout)
	for {
		info, err := do(s.Addr(), time.Second, "INFO", "sentinel")
		var replicas []string
		if err == nil && strings.Contains(info, "status=ok,") {
			replicas, err = doAll(s.Addr(), time.Second, "SENTINEL", "REPLICAS", MasterSet)
		}
		// Flattened field-value pairs of each replica; a connected one
		// that is up has exactly the flag "slave".
		up := 0
		for i := 0; i+1 < len(replicas); i += 2 {
			if replicas[i] == "flags" && replicas[i+1] == "slave" {
				up++
			}
		}
		if err == nil && up == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: sentinel %s: master and %d replicas not up after %v: %v %q %q",
				s.Addr(), n, startTimeout, err, info, replicas)
		}
		time.Sleep(pollInterval)
	}
}

// SentinelMaster returns the "127.0.0.1:PORT" of the master a Sentinel
// started by StartSentinel names now: the monitored master until it fails
// it over, then the replica it promoted.
func (s *Server) SentinelMaster() (string, error) {
	reply, err := doAll(s.Addr(), time.Second, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterSet)
	if err != nil {
		return "", fmt.Errorf("redistest: sentinel %s: %w", s.Addr(), err)
	}
	if len(reply) != 2 || slices.Contains(reply, "") {
		return "", fmt.Errorf("redistest: sentinel %s: master address %q", s.Addr(), reply)
	}
	if _, err := strconv.Atoi(reply[1]); err != nil {
		return "", fmt.Errorf("redistest: sentinel %s: master address %q", s.Addr(), reply)
	}
	return net.JoinHostPort(reply[0], reply[1]), nil
}

// StartSentinelT is StartSentinel for tests: it registers tb.Cleanup to
// Close the Sentinel and calls tb.Fatal with the error message on failure.
func StartSentinelT(tb testing.TB, master *Server, replicas int) *Server {
	tb.Helper()
	s, err := StartSentinel(master, replicas)
	return closedWith(tb, s, err)
}

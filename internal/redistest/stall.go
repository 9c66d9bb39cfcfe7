package redistest

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// stallChunk is the size of one junk value StallReplication writes, and
// stallBuffered what the master must hold for the replica before it stops.
const (
	stallChunk    = 1 << 20
	stallBuffered = 1 << 20
)

// StallReplication pauses the replica s (SIGSTOP, see Pause) and writes
// junk to its master until the master holds at least 1MB of the
// replication stream in its own output buffer for s: the kernel's socket
// buffers of the link are full. From then on every write the master
// acknowledges stays in the master's memory until s is resumed, and is
// lost if the master dies first: an acknowledged write that a failover
// loses, on purpose. The junk goes to one key "redistest:junk:N" of a slot
// the master serves ("redistest:junk" on a standalone master). Resume s
// with Resume, soon: a Cluster marks a node failed after its NodeTimeout.
func (s *Server) StallReplication() error {
	info, err := do(s.Addr(), time.Second, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("redistest: StallReplication: %w", err)
	}
	if !strings.Contains(info, "role:slave\r\n") {
		return fmt.Errorf("redistest: StallReplication on %s, which is no replica", s.Addr())
	}
	master := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
	// The link's local address on the replica is its peer's on the master.
	link, err := do(s.Addr(), time.Second, "CLIENT", "LIST", "TYPE", "master")
	if err != nil {
		return fmt.Errorf("redistest: StallReplication: CLIENT LIST on %s: %w", s.Addr(), err)
	}
	local := listField(link, "", "laddr")
	if local == "" {
		return fmt.Errorf("redistest: StallReplication: no link to its master on %s: %q", s.Addr(), link)
	}
	key, err := junkKey(master)
	if err != nil {
		return err
	}
	if err := s.Pause(); err != nil {
		return err
	}
	junk := strings.Repeat("x", stallChunk)
	deadline := time.Now().Add(startTimeout)
	for {
		if _, err := do(master, 5*time.Second, "APPEND", key, junk); err != nil {
			return fmt.Errorf("redistest: StallReplication: junk to %s: %w", master, err)
		}
		list, err := do(master, time.Second, "CLIENT", "LIST", "TYPE", "replica")
		if err != nil {
			return fmt.Errorf("redistest: StallReplication: CLIENT LIST on %s: %w", master, err)
		}
		if omem, err := strconv.Atoi(listField(list, local, "omem")); err == nil && omem >= stallBuffered {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: StallReplication: %s does not buffer for %s (%s): %q", master, s.Addr(), local, list)
		}
	}
}

// listField returns field name of the client whose addr is addr ("" for
// the first) in a CLIENT LIST reply, or "".
func listField(list, addr, name string) string {
	for line := range strings.Lines(list) {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if addr == "" || fields["addr"] == addr {
			return fields[name]
		}
	}
	return ""
}

// junkKey returns a key that the master at addr serves.
func junkKey(addr string) (string, error) {
	info, err := do(addr, time.Second, "INFO", "cluster")
	if err != nil {
		return "", fmt.Errorf("redistest: INFO cluster on %s: %w", addr, err)
	}
	if !strings.Contains(info, "cluster_enabled:1") {
		return "redistest:junk", nil
	}
	for i := range 1000 {
		key := "redistest:junk:" + strconv.Itoa(i)
		reply, err := do(addr, time.Second, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			return "", fmt.Errorf("redistest: CLUSTER KEYSLOT on %s: %w", addr, err)
		}
		slot, _ := strconv.Atoi(reply)
		if owner, err := ownerSeenBy(addr, slot); err == nil && owner == addr {
			return key, nil
		}
	}
	return "", fmt.Errorf("redistest: no key for a slot of %s", addr)
}

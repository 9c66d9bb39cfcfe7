// Package redistest starts and controls real redis-server processes on free
// loopback ports for tests and benchmarks: standalone servers, replicas of
// them, Sentinels that fail a master over to its replica, and Clusters.
//
// Every server binds only 127.0.0.1, keeps no persistence (--save "",
// --appendonly no) and lives in its own temporary directory, which also holds
// its log (redis.log). Children run in their own process group and are
// SIGKILLed by the kernel if the test process dies (Linux).
package redistest

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	startTimeout   = 10 * time.Second
	clusterTimeout = 30 * time.Second
	linkTimeout    = 10 * time.Second
	pollInterval   = 20 * time.Millisecond
	startAttempts  = 5
	clusterBusIncr = 10000
	clusterSlots   = 16384

	defaultClusterNodeTimeout = 5 * time.Second
)

// errNotFound is the exact message returned when redis-server is not on PATH.
const errNotFound = "redis-server not found on PATH: Baton's tests need a real Redis 7; install it (Debian/Ubuntu: apt-get install -y redis-server)"

// Options configures Start. A nil *Options means all defaults.
type Options struct {
	// Port is the TCP port to listen on; 0 (the default) picks a free
	// loopback port and retries with another one if it gets taken.
	Port int
	// Args are extra redis-server arguments appended after the harness's own,
	// e.g. {"--maxmemory", "10mb"}. Default none.
	Args []string
	// Cluster starts the server with --cluster-enabled yes,
	// --cluster-node-timeout (ClusterNodeTimeout) and a cluster config file
	// in its directory; an auto-picked port then also has port+10000 free
	// for the cluster bus. Default false. StartCluster sets it.
	Cluster bool
	// ClusterNodeTimeout is a cluster node's cluster-node-timeout: how long
	// a master may go unanswered before the others mark it failed and its
	// replica takes over. Default 5s.
	ClusterNodeTimeout time.Duration
	// ReplicaOf is the "host:port" of a master to replicate (--replicaof);
	// Start then also waits (up to 10s) until the replica reports its link
	// to the master up, so that it holds the master's data. It may be a
	// proxy in front of the master, to hold or cut the replication stream.
	// Default "": a master.
	ReplicaOf string
	// Env are extra environment variables ("NAME=value") of the server
	// process, added to the test process's own, e.g. to preload a library
	// (StartWithClock). Default none.
	Env []string
}

// Server is a redis-server child process owned by the test. Its methods are
// safe for concurrent use.
type Server struct {
	bin  string
	dir  string
	port int
	opts Options

	sentinel string // the sentinel.conf path of a Sentinel; "" for a server

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	paused bool
	closed bool
}

// Start starts a redis-server on 127.0.0.1 with a fresh temporary directory
// and waits (up to 10s) until it answers PING. If redis-server is not on PATH
// it returns an error explaining how to install it; if the server does not
// become ready it returns an error containing the tail of the server log.
// With Options.Port == 0 a start that fails because the port was taken is
// retried on another free port a few times. The caller must Close the Server.
func Start(opts *Options) (*Server, error) {
	if opts == nil {
		opts = &Options{}
	}
	if opts.ReplicaOf != "" {
		if _, _, err := net.SplitHostPort(opts.ReplicaOf); err != nil {
			return nil, fmt.Errorf("redistest: ReplicaOf: %w", err)
		}
	}
	s, err := start(opts, "")
	if err != nil || opts.ReplicaOf == "" {
		return s, err
	}
	if err := s.waitLinkUp(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// start starts a server, or with conf a Sentinel configured by it.
func start(opts *Options, conf string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New(errNotFound)
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	s := &Server{bin: bin, dir: dir, port: opts.Port, opts: *opts}
	s.opts.Args = append([]string(nil), opts.Args...)
	s.opts.Env = append([]string(nil), opts.Env...)
	if conf != "" {
		// A Sentinel rewrites its configuration file: it must be its own.
		s.sentinel = filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(s.sentinel, []byte(conf), 0o600); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: %w", err)
		}
	}
	for attempt := 1; ; attempt++ {
		if opts.Port == 0 {
			if s.port, err = freePort(opts.Cluster); err != nil {
				break
			}
		}
		var inUse bool
		if inUse, err = s.launch(); err == nil {
			return s, nil
		}
		if !inUse || opts.Port != 0 || attempt == startAttempts {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, err
}

// Addr returns the server address, "127.0.0.1:PORT". It never changes.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the server's TCP port. It never changes, even across Restart.
func (s *Server) Port() int { return s.port }

// Kill sends SIGKILL to the server and waits (up to 10s) for it to exit. It is
// idempotent: killing a server that is not running returns nil.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kill()
}

// Pause stops the server with SIGSTOP, so it accepts connections but answers
// nothing until Resume. It returns once the process has stopped, or an
// error if the server is not running.
func (s *Server) Pause() error { return s.stopCont(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT. It returns an error if the
// server is not running.
func (s *Server) Resume() error { return s.stopCont(syscall.SIGCONT, false) }

// Restart kills the server if it is running and starts it again on the same
// port with the same arguments and directory (data is not persisted, but a
// cluster node keeps its identity). A failure to bind the port is retried for
// up to 10s; otherwise the error contains the tail of the server log. It
// returns an error after Close.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redistest: Restart on closed server")
	}
	if err := s.kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		inUse, err := s.launch()
		if err == nil || !inUse || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Close resumes the server if paused, kills it and removes its temporary
// directory. It is idempotent; later calls return nil.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.paused {
		_ = s.signal(syscall.SIGCONT)
		s.paused = false
	}
	return errors.Join(s.kill(), os.RemoveAll(s.dir))
}

func (s *Server) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// signal signals the server's process group (Setpgid makes its pgid its pid).
func (s *Server) signal(sig syscall.Signal) error {
	return syscall.Kill(-s.cmd.Process.Pid, sig)
}

func (s *Server) stopCont(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running() {
		return fmt.Errorf("redistest: server on port %d is not running", s.port)
	}
	if err := s.signal(sig); err != nil {
		return fmt.Errorf("redistest: %v: %w", sig, err)
	}
	s.paused = paused
	if paused {
		return s.waitStopped()
	}
	return nil
}

// waitStopped waits until the server's process has stopped, so that no
// command sent after Pause returns is run before Resume: the kernel stops a
// process that is running on another CPU only at its next kernel entry.
// Where /proc is missing it returns at once.
func (s *Server) waitStopped() error {
	path := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	deadline := time.Now().Add(startTimeout)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		// "pid (comm) state ...": the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: server on port %d did not stop after SIGSTOP", s.port)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (s *Server) kill() error {
	if !s.running() {
		s.cmd, s.paused = nil, false
		return nil
	}
	if err := s.signal(syscall.SIGKILL); err != nil {
		_ = s.cmd.Process.Kill()
	}
	select {
	case <-s.done:
	case <-time.After(startTimeout):
		return fmt.Errorf("redistest: server on port %d did not exit after SIGKILL", s.port)
	}
	s.cmd, s.paused = nil, false
	return nil
}

func (s *Server) args() []string {
	var a []string
	if s.sentinel != "" {
		a = []string{s.sentinel, "--sentinel"}
	}
	a = append(a,
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--protected-mode", "no",
		"--dir", s.dir, "--daemonize", "no",
		// A replica's first sync starts at once, not after 5s.
		"--repl-diskless-sync-delay", "0",
	)
	if s.opts.ReplicaOf != "" {
		host, port, _ := net.SplitHostPort(s.opts.ReplicaOf)
		a = append(a, "--replicaof", host, port)
	}
	if s.opts.Cluster {
		timeout := cmp.Or(s.opts.ClusterNodeTimeout, defaultClusterNodeTimeout)
		a = append(a, "--cluster-enabled", "yes", "--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"))
	}
	return append(a, s.opts.Args...)
}

// launch starts the process and waits until it is ready. On failure the
// process is killed, and inUse reports whether it failed to bind its port.
func (s *Server) launch() (inUse bool, err error) {
	logPath := filepath.Join(s.dir, "redis.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return false, fmt.Errorf("redistest: %w", err)
	}
	offset, _ := f.Seek(0, io.SeekEnd)
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, f, f
	if len(s.opts.Env) > 0 {
		cmd.Env = append(os.Environ(), s.opts.Env...)
	}
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	_ = f.Close()
	if err != nil {
		return false, fmt.Errorf("redistest: starting redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done, s.paused = cmd, done, false

	if err = s.waitReady(time.Now().Add(startTimeout)); err == nil {
		return false, nil
	}
	_ = s.kill()
	log := readFrom(logPath, offset)
	return strings.Contains(log, "Address already in use"),
		fmt.Errorf("redistest: redis-server on %s: %v; log tail:\n%s", s.Addr(), err, tail(log, 20))
}

// waitReady polls until the server answers PING and INFO reports our pid, so
// that a foreign server already listening on the port is never mistaken for it.
func (s *Server) waitReady(deadline time.Time) error {
	want := "process_id:" + strconv.Itoa(s.cmd.Process.Pid) + "\r\n"
	for {
		select {
		case <-s.done:
			return fmt.Errorf("exited during startup (%v)", s.cmd.ProcessState)
		default:
		}
		if pong, err := do(s.Addr(), 200*time.Millisecond, "PING"); err == nil && pong == "PONG" {
			if info, err := do(s.Addr(), 200*time.Millisecond, "INFO", "server"); err == nil && strings.Contains(info, want) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("no PING answer within " + startTimeout.String())
		}
		time.Sleep(pollInterval)
	}
}

// waitLinkUp polls until a replica reports its link to its master up: it
// has loaded the master's data and receives its writes.
func (s *Server) waitLinkUp() error {
	deadline := time.Now().Add(linkTimeout)
	for {
		info, err := do(s.Addr(), time.Second, "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up\r\n") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: replica %s: link to its master not up after %v: %v %q", s.Addr(), linkTimeout, err, info)
		}
		time.Sleep(pollInterval)
	}
}

// Synced waits (up to 10s) until a replica has applied every write its
// master had made when Synced was called: the replica's replication offset
// reaches the master's. The master is Options.ReplicaOf (which may be a
// proxy in front of it) or, for a replica made so by its cluster, the one
// the replica names. It is what WAIT promises, without WAIT's catch that it
// counts only the writes of the connection it is sent on (a client library
// may send it on another). It returns an error if the server is no replica,
// or the master or the replica does not answer.
func (s *Server) Synced() error {
	info, err := do(s.Addr(), time.Second, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("redistest: Synced: replica %s: %w", s.Addr(), err)
	}
	if !strings.Contains(info, "role:slave\r\n") {
		return fmt.Errorf("redistest: Synced on %s, which is no replica", s.Addr())
	}
	master := s.opts.ReplicaOf
	if master == "" {
		host, port := infoField(info, "master_host"), infoField(info, "master_port")
		master = net.JoinHostPort(host, port)
	}
	info, err = do(master, time.Second, "INFO", "replication")
	if err != nil {
		return fmt.Errorf("redistest: Synced: master %s: %w", master, err)
	}
	want, ok := infoInt(info, "master_repl_offset")
	if !ok {
		return fmt.Errorf("redistest: Synced: master %s: no offset in %q", master, info)
	}
	deadline := time.Now().Add(linkTimeout)
	for {
		info, err := do(s.Addr(), time.Second, "INFO", "replication")
		got, ok := infoInt(info, "slave_repl_offset")
		if err == nil && ok && got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: replica %s not at its master's offset %d after %v: %v %q", s.Addr(), want, linkTimeout, err, info)
		}
		time.Sleep(pollInterval)
	}
}

// infoField returns the field name of an INFO reply, or "".
func infoField(info, name string) string {
	_, rest, ok := strings.Cut(info, "\r\n"+name+":")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "\r\n")
	return v
}

// infoInt returns the integer field name of an INFO reply.
func infoInt(info, name string) (int64, bool) {
	n, err := strconv.ParseInt(infoField(info, name), 10, 64)
	return n, err == nil
}

// StartT is Start for tests: it registers tb.Cleanup to Close the server
// (reporting a Close error with tb.Error) and calls tb.Fatal with the error
// message if the server cannot be started.
func StartT(tb testing.TB, opts *Options) *Server {
	tb.Helper()
	s, err := Start(opts)
	return closedWith(tb, s, err)
}

// closedWith returns v, closed when tb ends (a Close error reported with
// tb.Error), or calls tb.Fatal with err if it is not nil.
func closedWith[T io.Closer](tb testing.TB, v T, err error) T {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := v.Close(); err != nil {
			tb.Error(err)
		}
	})
	return v
}

// shared is a lazily started instance kept for the whole test binary.
type shared[T io.Closer] struct {
	mu      sync.Mutex
	started bool
	v       T
	err     error
}

func (l *shared[T]) get(tb testing.TB, start func() (T, error)) T {
	tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.started {
		l.v, l.err = start()
		l.started = true
	}
	if l.err != nil {
		tb.Fatalf("redistest: shared instance: %v", l.err)
	}
	return l.v
}

func (l *shared[T]) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started && l.err == nil {
		_ = l.v.Close()
	}
	var zero T
	l.started, l.v, l.err = false, zero, nil
}

var (
	sharedServer  shared[*Server]
	sharedCluster shared[*Cluster]
)

// SharedServer returns a default Server shared by every test in the binary,
// started on first use. Tests must isolate themselves by key prefix and must
// not Kill, Pause, Restart or Close it. If starting fails, this and every
// later call (until CloseShared) calls tb.Fatal with the error. Call
// CloseShared from TestMain after m.Run.
func SharedServer(tb testing.TB) *Server {
	tb.Helper()
	return sharedServer.get(tb, func() (*Server, error) { return Start(nil) })
}

// SharedCluster returns a 3-master Cluster shared by every test in the
// binary, started on first use, with the same rules and failure behaviour as
// SharedServer.
func SharedCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return sharedCluster.get(tb, func() (*Cluster, error) { return StartCluster(3) })
}

// CloseShared closes the shared Server and Cluster if they were started and
// forgets them (a later Shared* call starts new ones). Call it from TestMain
// after m.Run; it is safe to call when nothing was started.
func CloseShared() {
	sharedServer.close()
	sharedCluster.close()
}

// freePort returns a loopback port that was free a moment ago; for a cluster
// node it is <= 55535 and port+10000 (the cluster bus) is free too.
func freePort(cluster bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: finding a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !cluster {
			return port, nil
		}
		if port+clusterBusIncr > 65535 {
			continue
		}
		if bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+clusterBusIncr))); err == nil {
			_ = bus.Close()
			return port, nil
		}
	}
	return 0, errors.New("redistest: no free port pair for a cluster node")
}

// do sends one command to addr over a fresh connection and returns a simple,
// integer or bulk string reply; an error reply is returned as an error.
func do(addr string, timeout time.Duration, args ...string) (string, error) {
	reply, err := doAll(addr, timeout, args...)
	if err == nil && len(reply) != 1 {
		return "", fmt.Errorf("unexpected reply %q", reply)
	}
	if err != nil {
		return "", err
	}
	return reply[0], nil
}

// doAll is do for any reply: an array's elements, nested arrays flattened,
// or the one string of a simple, integer or bulk reply. A null is "".
func doAll(addr string, timeout time.Duration, args ...string) ([]string, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(conn), nil)
}

// readReply reads one RESP2 reply and appends its strings to out.
func readReply(r *bufio.Reader, out []string) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return append(out, line[1:]), nil
	case '-':
		return nil, errors.New(line[1:])
	case '$', '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, fmt.Errorf("unexpected reply %q", line)
		}
		if n < 0 {
			return append(out, ""), nil
		}
		if line[0] == '*' {
			for range n {
				if out, err = readReply(r, out); err != nil {
					return nil, err
				}
			}
			return out, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return append(out, string(buf[:n])), nil
	}
	return nil, fmt.Errorf("unsupported reply %q", line)
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func readFrom(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	return string(b[offset:])
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

package redistest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Clock is the real-time clock of a redis-server started by
// StartWithClock, which a test steps forward or backward as NTP stepping
// the host's clock, or an operator's date -s, would: TIME, key expiry
// (PX, PEXPIRE) and everything else the server reads from the real-time
// clock jump; its monotonic clock (the event loop's timers) does not, as
// it does not when a real host's clock is stepped. The test process's own
// clocks are not touched.
//
// It is libfaketime (Debian: apt-get install -y faketime) preloaded into
// the server, reading its offset from a file that Jump rewrites and that
// the library reads again at every clock call (FAKETIME_NO_CACHE). Before
// it, glibc's libc_malloc_debug is preloaded too: Debian's redis-server
// allocates with the system's jemalloc, whose start-up reads the clock
// while libfaketime starts up and hangs the server (libfaketime issues
// #130, #327); with libc_malloc_debug first, malloc is glibc's and
// libfaketime starts before jemalloc does. Redis works as ever with that
// (its memory figures in INFO are glibc's).
type Clock struct {
	srv  *Server
	path string

	mu     sync.Mutex
	offset time.Duration
}

// libfaketime and libMallocDebug are where Debian-like systems keep the
// two libraries, for any architecture.
var (
	libfaketime = []string{
		"/usr/lib/*/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1",
		"/usr/lib64/faketime/libfaketime.so.1", "/usr/local/lib/faketime/libfaketime.so.1",
	}
	libMallocDebug = []string{
		"/lib/*/libc_malloc_debug.so.0", "/usr/lib/*/libc_malloc_debug.so.0",
		"/lib64/libc_malloc_debug.so.0", "/usr/lib64/libc_malloc_debug.so.0",
	}
)

// findLib returns the first file that one of patterns matches.
func findLib(patterns []string) (string, bool) {
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0], true
		}
	}
	return "", false
}

// StartWithClock starts a redis-server (StartT with default options) whose
// real-time clock the returned Clock moves, at first at the host's time.
// Without libfaketime or glibc's libc_malloc_debug on the machine it skips
// the test, saying how to install them, except under CI=true, where it
// fails it: CI installs them (.ci/run).
func StartWithClock(tb testing.TB) (*Server, *Clock) {
	tb.Helper()
	ft, ok := findLib(libfaketime)
	if !ok {
		missing(tb, "libfaketime not found", "apt-get install -y faketime")
	}
	md, ok := findLib(libMallocDebug)
	if !ok {
		missing(tb, "glibc's libc_malloc_debug.so.0 not found", "glibc 2.34 or later (Debian 12: package libc6)")
	}
	c := &Clock{path: filepath.Join(tb.TempDir(), "faketime")}
	if err := c.write(); err != nil {
		tb.Fatal(err)
	}
	c.srv = StartT(tb, &Options{Env: []string{
		"LD_PRELOAD=" + md + ":" + ft,
		"FAKETIME_TIMESTAMP_FILE=" + c.path,
		"FAKETIME_NO_CACHE=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}})
	c.check(tb) // the library is in place and reads the file
	return c.srv, c
}

func missing(tb testing.TB, what, install string) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s: CI must install it (.ci/run does: %s)", what, install)
	}
	tb.Skipf("%s: skipping a test that moves the Redis server's clock; %s to run it (under CI=true it fails instead)", what, install)
}

// Jump steps the server's real-time clock by d (backward if negative) and
// returns once the server's TIME reports the new time; it calls tb.Fatal
// if it does not within 5s. Offsets add up. Call it from the test's
// goroutine.
func (c *Clock) Jump(tb testing.TB, d time.Duration) {
	tb.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
	if err := c.write(); err != nil {
		tb.Fatal(err)
	}
	c.check(tb)
}

// Offset returns how far the server's clock is from the host's: the sum of
// the jumps.
func (c *Clock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// write replaces the offset file in one rename: the server never reads
// half of it.
func (c *Clock) write() error {
	tmp := c.path + ".tmp"
	spec := fmt.Sprintf("%+.6fs\n", c.offset.Seconds()) // "+2.500000s": C locale's decimal point
	if err := os.WriteFile(tmp, []byte(spec), 0o644); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	if err := os.Rename(tmp, c.path); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// clockTolerance is how far the server's TIME may be from the host's clock
// plus the offset, beyond the call's round trip: both read one kernel
// clock.
const clockTolerance = 5 * time.Millisecond

// check waits until the server's TIME is the host's time plus the offset.
func (c *Clock) check(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(startTimeout / 2)
	for {
		before := time.Now()
		t, err := doAll(c.srv.Addr(), time.Second, "TIME")
		after := time.Now()
		var server time.Time
		if err == nil && len(t) == 2 {
			sec, err1 := strconv.ParseInt(t[0], 10, 64)
			usec, err2 := strconv.ParseInt(t[1], 10, 64)
			if err1 == nil && err2 == nil {
				server = time.Unix(sec, usec*1000)
			}
		}
		lo, hi := before.Add(c.offset-clockTolerance), after.Add(c.offset+clockTolerance)
		if !server.IsZero() && !server.Before(lo) && !server.After(hi) {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: the server's clock is not at the host's %+v: TIME %v (%v), want %v..%v; log tail:\n%s",
				c.offset, server, err, lo, hi, tail(readFrom(filepath.Join(c.srv.dir, "redis.log"), 0), 10))
		}
		time.Sleep(pollInterval)
	}
}

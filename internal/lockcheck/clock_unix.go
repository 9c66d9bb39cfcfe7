//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly || solaris

package lockcheck

import "golang.org/x/sys/unix"

// Now returns CLOCK_MONOTONIC in nanoseconds. The clock is the machine's, not
// the process's, so times taken by different processes on one machine
// compare; it never jumps with wall-clock changes.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("lockcheck: clock_gettime(CLOCK_MONOTONIC): " + err.Error())
	}
	return ts.Nano()
}

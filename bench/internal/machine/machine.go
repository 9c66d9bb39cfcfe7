// Package machine describes where a benchmark ran: the header a
// benchmark command prints before its tables, and the versions of the
// modules built into it.
package machine

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// PrintHeader writes the command's name and its machine, Go and
// redis-server lines: the server is the private one at addr, of version
// redisVersion, started by internal/redistest.
func PrintHeader(w io.Writer, name, redisVersion, addr string) {
	fmt.Fprintln(w, name)
	fmt.Fprintf(w, "  machine:      %d CPUs (GOMAXPROCS %d), %s/%s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "  go:           %s\n", runtime.Version())
	fmt.Fprintf(w, "  redis-server: %s (private, %s, started by internal/redistest)\n", redisVersion, addr)
}

// PrintMode writes the mode line and a blank line: "full", or with quick
// "quick (-quick: " + what + ", figures are noisy)", what saying how
// -quick shortens the run.
func PrintMode(w io.Writer, quick bool, what string) {
	mode := "full"
	if quick {
		mode = "quick (-quick: " + what + ", figures are noisy)"
	}
	fmt.Fprintf(w, "  mode:         %s\n\n", mode)
}

// ModuleVersion is the version of module path built into this binary,
// "unknown" if it is not one of its dependencies.
func ModuleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "unknown"
}

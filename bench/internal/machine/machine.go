// Package machine describes where a benchmark ran: the header a
// benchmark command prints before its tables.
package machine

import (
	"fmt"
	"io"
	"runtime"
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

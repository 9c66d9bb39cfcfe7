package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Main is a TestMain for packages that use this harness. When the test
// binary was started again as a child process with BATON_CHILD=name, it runs
// children[name] instead and exits with its code. Otherwise it runs the
// tests, closes the shared servers (CloseShared) and, if the tests passed,
// fails the run on leaked goroutines.
func Main(m *testing.M, children map[string]func() int) {
	if name := os.Getenv("BATON_CHILD"); name != "" {
		run, ok := children[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "unknown BATON_CHILD %q\n", name)
			os.Exit(2)
		}
		os.Exit(run())
	}
	code := m.Run()
	CloseShared()
	if code == 0 {
		if err := goleak.Find(lingeringRueidis...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// lingeringRueidis are goroutines a rueidis cluster client leaves running,
// for a bounded time, after Close when a node connection broke: a delayed
// topology refresh and the closing, 5s later, of connections it replaced.
var lingeringRueidis = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
}

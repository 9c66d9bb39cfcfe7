package batontest_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// fakeTB is a testing.TB that records failures instead of failing the
// test, so that the helpers' failures can be asserted. Fatalf and FailNow
// end the goroutine, as in a real test: call the helper under test through
// run.
type fakeTB struct {
	testing.TB // the methods the helpers must not call panic (nil)

	mu       sync.Mutex
	errors   []string
	fatal    bool
	helperOK bool
}

func (f *fakeTB) Helper() {
	f.mu.Lock()
	f.helperOK = true
	f.mu.Unlock()
}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	f.FailNow()
}

func (f *fakeTB) FailNow() {
	f.mu.Lock()
	f.fatal = true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.errors) > 0 || f.fatal
}

// run calls fn with a fresh fakeTB in a goroutine of its own, which Fatalf
// may end, and returns the fakeTB once fn has returned or been ended.
func run(fn func(tb testing.TB)) *fakeTB {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f
}

// requirePassed fails t unless f recorded no failure.
func requirePassed(t *testing.T, f *fakeTB) {
	t.Helper()
	if f.Failed() {
		t.Fatalf("the helper failed: %s", strings.Join(f.errors, "\n"))
	}
}

// requireFatal fails t unless f was stopped with Fatalf and its message
// holds each of want.
func requireFatal(t *testing.T, f *fakeTB, want ...string) {
	t.Helper()
	if !f.fatal {
		t.Fatalf("the helper did not stop the test with Fatalf (errors: %q)", f.errors)
	}
	msg := strings.Join(f.errors, "\n")
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Fatalf("the failure does not say %q:\n%s", w, msg)
		}
	}
}

package queuenotice

import (
	"testing"
	"time"

	"github.com/batonhq/baton/batondriver"
)

func receive(t *testing.T, m *Mailbox) batondriver.QueueNotice {
	t.Helper()
	select {
	case n := <-m.C():
		return n
	case <-time.After(5 * time.Second):
		t.Fatal("no notice")
		return batondriver.QueueNotice{}
	}
}

func quiet(t *testing.T, m *Mailbox) {
	t.Helper()
	select {
	case n := <-m.C():
		t.Fatalf("unexpected notice %+v", n)
	case <-time.After(20 * time.Millisecond):
	}
}

// Posts never block, and none is lost: the posts of a key not yet handed
// on merge into its highest fence.
func TestPostsMergeAndNoneIsLost(t *testing.T) {
	m := New()
	defer m.Close()
	for i := range 10000 {
		m.Post(batondriver.QueueNotice{Key: "a", Fence: int64(i)})
		m.Post(batondriver.QueueNotice{Key: "b", Fence: int64(5 - i%3)})
	}
	last := map[string]int64{}
	n := 0
	for {
		select {
		case got := <-m.C():
			last[got.Key] = got.Fence
			n++
			continue
		case <-time.After(50 * time.Millisecond):
		}
		break
	}
	// The run may have taken a notice of each key before the rest came.
	if last["a"] != 9999 || last["b"] != 5 || n > 4 {
		t.Fatalf("got %d notices, the last of each key %v; want a 9999, b 5, at most 4", n, last)
	}
}

// A recheck comes before the keys waiting with it, and once however often
// it was posted.
func TestRecheckFirstAndOnce(t *testing.T) {
	m := New()
	defer m.Close()
	m.Post(batondriver.QueueNotice{Key: "a", Fence: 1})
	m.Post(batondriver.QueueNotice{Recheck: true})
	m.Post(batondriver.QueueNotice{Recheck: true})
	first := receive(t, m)
	if first.Key == "a" { // handed on before the recheck came
		first = receive(t, m)
	} else if n := receive(t, m); n != (batondriver.QueueNotice{Key: "a", Fence: 1}) {
		t.Fatalf("after the recheck: %+v", n)
	}
	if !first.Recheck {
		t.Fatalf("got %+v, want a recheck", first)
	}
	quiet(t, m)
}

// Close stops the mailbox: nothing more is handed on, and posting after it
// does not block.
func TestCloseStops(t *testing.T) {
	m := New()
	m.Close()
	m.Close()
	m.Post(batondriver.QueueNotice{Key: "a", Fence: 1})
	quiet(t, m)
}

// Cancels come after a recheck and before recalls, each job once while
// not handed on.
func TestCancelsOnceEach(t *testing.T) {
	m := New()
	defer m.Close()
	m.Post(batondriver.QueueNotice{Key: "a", Fence: 1})
	m.Post(batondriver.QueueNotice{Cancel: "j1"})
	m.Post(batondriver.QueueNotice{Cancel: "j2"})
	m.Post(batondriver.QueueNotice{Cancel: "j1"})
	got := map[batondriver.QueueNotice]int{}
	for range 3 {
		got[receive(t, m)]++
	}
	quiet(t, m)
	want := map[batondriver.QueueNotice]int{{Key: "a", Fence: 1}: 1, {Cancel: "j1"}: 1, {Cancel: "j2"}: 1}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for n, c := range want {
		if got[n] != c {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

package demo

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHandoffIsTheLatestFreedSlot: a waiting job's handoff runs from the
// return that freed the slot it took, the latest before it started, even
// when an earlier return's slot went to a job the tracker did not see
// waiting (a retry come due, say).
func TestHandoffIsTheLatestFreedSlot(t *testing.T) {
	tr := newTracker()
	tr.key("k", 1)
	returnA := tr.start("k", "a", 1)
	tr.parked("k", "w")
	returnA()                        // frees the slot...
	returnX := tr.start("k", "x", 2) // ...which x takes, unseen waiting
	time.Sleep(50 * time.Millisecond)
	returnX()
	tr.start("k", "w", 3)()
	h := tr.snapshot()[0].handoffs
	require.Len(t, h, 1)
	require.Less(t, h[0], 25*time.Millisecond, "w started just after x returned, not 50ms after a returned")
}

// TestHandoffWhileHalted: a job leased before its key was halted, chained
// behind a holder, starts when that holder returns during the halt: its
// handoff runs from that return.
func TestHandoffWhileHalted(t *testing.T) {
	tr := newTracker()
	tr.key("k", 2)
	returnA := tr.start("k", "a", 1)
	returnB := tr.start("k", "b", 2)
	tr.parked("k", "w")
	returnA() // w is promoted, chained behind b
	time.Sleep(50 * time.Millisecond)
	tr.halting("k")
	tr.halted(3, 1)
	returnB()
	tr.start("k", "w", 3)()
	h := tr.snapshot()[0].handoffs
	require.Len(t, h, 1)
	require.Less(t, h[0], 25*time.Millisecond, "w started just after b returned, not 50ms after a returned")
}

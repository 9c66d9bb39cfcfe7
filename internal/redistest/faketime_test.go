package redistest

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The server's real-time clock jumps, and Redis expires keys by it: a
// forward jump past a key's PX expiry removes the key, a backward jump
// makes it live longer by the jump. A Restart keeps the clock's offset.
// Shown to fail without the clock: with Env left out of launch (so
// libfaketime is not preloaded), StartWithClock fails its check of the
// first jump.
func TestClockJump(t *testing.T) {
	t.Parallel()
	s, clock := StartWithClock(t)
	ttl := func(key string) int {
		t.Helper()
		v, err := do(s.Addr(), time.Second, "PTTL", key)
		require.NoError(t, err)
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	_, err := do(s.Addr(), time.Second, "SET", "fwd", "1", "PX", "5000")
	require.NoError(t, err)
	clock.Jump(t, 6*time.Second)
	require.Equal(t, -2, ttl("fwd"), "a forward jump past its expiry removes a key")

	_, err = do(s.Addr(), time.Second, "SET", "back", "1", "PX", "1000")
	require.NoError(t, err)
	clock.Jump(t, -5*time.Second)
	require.Equal(t, time.Second, clock.Offset())
	time.Sleep(1100 * time.Millisecond)
	require.Greater(t, ttl("back"), 4000, "a backward jump makes a key live longer by the jump")

	require.NoError(t, s.Restart())
	clock.check(t)
}

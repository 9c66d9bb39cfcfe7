package jobid

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// decode returns the ID's millisecond timestamp (its first 10 digits).
func decode(t *testing.T, id string) time.Time {
	t.Helper()
	var ms uint64
	for _, c := range id[:10] {
		i := strings.IndexRune(alphabet, c)
		require.GreaterOrEqual(t, i, 0, "digit %q of %s", c, id)
		ms = ms<<5 | uint64(i)
	}
	return time.UnixMilli(int64(ms)) // 50 bits: 2 of padding, then the 48-bit time
}

func TestFormatAndTime(t *testing.T) {
	t.Parallel()
	before := time.Now().Truncate(time.Millisecond)
	id := New()
	after := time.Now()
	require.Len(t, id, Len)
	for _, c := range id {
		require.Contains(t, alphabet, string(c))
	}
	require.LessOrEqual(t, id[0], byte('7'), "the first digit holds 3 bits")
	ts := decode(t, id)
	require.False(t, ts.Before(before), "%v before %v", ts, before)
	require.False(t, ts.After(after), "%v after %v", ts, after)
}

func TestOrderedAndUnique(t *testing.T) {
	t.Parallel()
	prev := New()
	seen := map[string]bool{prev: true}
	for range 100_000 {
		id := New()
		require.Greater(t, id, prev)
		require.False(t, seen[id])
		seen[id] = true
		prev = id
	}
}

func TestConcurrentUnique(t *testing.T) {
	t.Parallel()
	const goroutines, each = 8, 5000
	ids := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				ids[g] = append(ids[g], New())
			}
		})
	}
	wg.Wait()
	seen := make(map[string]bool, goroutines*each)
	for _, list := range ids {
		for i, id := range list {
			require.False(t, seen[id], "duplicate %s", id)
			seen[id] = true
			if i > 0 {
				require.Greater(t, id, list[i-1], "IDs of one goroutine out of order")
			}
		}
	}
}

func TestEncodeCarries(t *testing.T) {
	t.Parallel()
	require.Equal(t, "00000000000000000000000000", encode(0, 0))
	require.Equal(t, "0000000000000000000000000Z", encode(0, 31))
	require.Equal(t, "00000000000000000000000010", encode(0, 32))
	require.Equal(t, "7ZZZZZZZZZZZZZZZZZZZZZZZZZ", encode(^uint64(0), ^uint64(0)))
	// Bit 64 is the lowest bit of hi: digit 13 from the right carries it.
	require.Equal(t, "0000000000000G000000000000", encode(1, 0))
}

func TestClockStepsBack(t *testing.T) {
	t.Parallel()
	var g generator
	a := g.next(1000)
	b := g.next(1000)
	c := g.next(900) // the clock stepped back
	d := g.next(1001)
	require.Less(t, a, b)
	require.Less(t, b, c)
	require.Less(t, c, d)
	require.Equal(t, a[:10], c[:10], "a step back keeps the last time")
}

func TestRandomPartOverflows(t *testing.T) {
	t.Parallel()
	g := generator{ms: 1000, hi: ^uint16(0), lo: ^uint64(0)}
	last := encode(1000<<16|uint64(g.hi), g.lo)
	id := g.next(1000)
	require.Greater(t, id, last)
	require.Equal(t, encode(1001<<16, 0), id, "an overflow borrows the next millisecond")
}

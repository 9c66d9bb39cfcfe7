// Package jobid makes job IDs: 26 characters of Crockford base32 holding a
// 48-bit Unix millisecond timestamp and 80 random bits, like a ULID. IDs
// compare as strings in the order they were made: across processes to the
// millisecond of their clocks, and strictly within one process, where an ID
// made in the same millisecond as the previous one (or while the wall clock
// stepped back) takes the previous random part plus one.
//
// It is a leaf package so that every backend makes IDs the same way.
package jobid

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"time"
)

// Len is the length of every ID.
const Len = 26

// alphabet is Crockford's base32: no I, L, O or U, and in ASCII order, so
// that the string order of IDs is their numeric order.
const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// std makes every ID of the process.
var std generator

// New returns a new ID, unique and later in string order than every ID this
// process made before.
func New() string {
	return std.next(uint64(time.Now().UnixMilli()))
}

// generator remembers the last ID it made.
type generator struct {
	mu sync.Mutex
	ms uint64 // the last ID's time
	hi uint16 // top 16 of its 80 random bits
	lo uint64 // the other 64
}

// next makes the ID of a clock reading of ms.
func (g *generator) next(ms uint64) string {
	g.mu.Lock()
	if ms > g.ms {
		var b [10]byte
		_, _ = rand.Read(b[:]) // never fails since Go 1.24
		g.ms, g.hi, g.lo = ms, binary.BigEndian.Uint16(b[:2]), binary.BigEndian.Uint64(b[2:])
	} else {
		// Same millisecond, or the clock stepped back: count up from the
		// previous ID. Overflowing 80 bits borrows the next millisecond.
		g.lo++
		if g.lo == 0 {
			g.hi++
			if g.hi == 0 {
				g.ms++
			}
		}
	}
	hi, lo := g.ms<<16|uint64(g.hi), g.lo
	g.mu.Unlock()
	return encode(hi, lo)
}

// encode writes the 128-bit value hi:lo as 26 base32 digits, most
// significant first (the first digit holds only the top 3 bits).
func encode(hi, lo uint64) string {
	var out [Len]byte
	for i := Len - 1; i >= 0; i-- {
		out[i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

package batonredis

import (
	"strings"
)

// Every Redis key and channel name Baton uses is built here. docs/redis-keys.md
// describes them.
//
// A lock key K under prefix P owns these names, all sharing the hash tag
// {enc(K)} so that every transition on K touches one Redis Cluster slot:
//
//	P:lock:{enc(K)}:h    sorted set: holders, member "fence:token", score = expiry (server ms)
//	P:lock:{enc(K)}:w    sorted set: waiters, member token, score = arrival sequence
//	P:lock:{enc(K)}:x    sorted set: waiters, member token, score = expiry of the place (server ms)
//	P:lock:{enc(K)}:i    hash: waiter token -> "ttl_ms|listener ID"
//	P:lock:{enc(K)}:c    hash: fence and seq counters, limit override, default limit (expires LockIdleTTL after its last use, unless it holds an override)
//	P:lock:{enc(K)}:n:ID shard channel: grant notices for waiters of driver instance ID
//
// and every lock key in use is a member K (its raw bytes) of
//
//	P:locks              sorted set: the lock key index, every score 0 (lockindex.go)
//
// and the registry of live worker processes (processes.go) is
//
//	P:{processes}:expiry   sorted set: process ID -> when its record expires (server ms)
//	P:{processes}:records  hash: process ID -> "started|seen|json"
//
// both under the hash tag {processes}, so in one Cluster slot (the same
// slot for every prefix), apart from every queue and lock.

// processKeys are the keys of the process registry, in the order the
// process scripts expect them.
func (d *Driver) processKeys() []string {
	return []string{d.prefix + ":{processes}:expiry", d.prefix + ":{processes}:records"}
}

// locksKey is the index of lock keys. It has no hash tag of a lock key, so
// no lock script touches it.
func (d *Driver) locksKey() string { return d.prefix + ":locks" }

// lockKeys are the keys of one lock, in the order the scripts expect them,
// and last the tag, which is never a key: named by every lock script, it
// has a Cluster refuse the script with TRYAGAIN for the whole move of the
// lock's slot (tryagain.go), as a job script is. Else a script that finds
// all five keys on the source runs there, and one that empties a key and
// then writes it (a release deletes H with its holder, then promotes a
// waiter into it) is aborted half done: Redis checks every key a script
// touches against the move (TestLockReleaseDuringSlotMove).
type lockKeys struct {
	tag     string // "P:lock:{enc(K)}"
	keys    []string
	channel string // channel prefix; the listener ID is appended
}

func (d *Driver) lockKeys(key string) lockKeys {
	tag := d.prefix + ":lock:{" + encodeKey(key) + "}"
	return lockKeys{
		tag:     tag,
		keys:    []string{tag + ":h", tag + ":w", tag + ":x", tag + ":i", tag + ":c", tag},
		channel: tag + ":n:",
	}
}

// encodeKey maps any byte string to one that contains no brace (so that the
// hash tag is exactly the encoded key), no separator Baton uses inside
// members, and only printable ASCII, so that keys read well in redis-cli. It
// is injective: '%' and every byte it rewrites become %XX.
func encodeKey(key string) string {
	if !needsEncoding(key) {
		return key
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(key) + 8)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if mustEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// decodeKey is the inverse of encodeKey. ok is false for a string encodeKey
// cannot produce.
func decodeKey(s string) (key string, ok bool) {
	if !strings.Contains(s, "%") {
		return s, !needsEncoding(s)
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if mustEscape(c) {
				return "", false
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", false
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 || !mustEscape(hi<<4|lo) {
			return "", false
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	return b.String(), true
}

func needsEncoding(s string) bool {
	for i := 0; i < len(s); i++ {
		if mustEscape(s[i]) {
			return true
		}
	}
	return false
}

func mustEscape(c byte) bool {
	return c < 0x21 || c > 0x7e || c == '%' || c == '{' || c == '}' || c == '|'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

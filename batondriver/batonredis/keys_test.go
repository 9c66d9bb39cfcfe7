package batonredis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/redistest"
)

// allBytes is every byte value once, in order: the worst case for encodeKey.
func allBytes() string {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte(i)
	}
	return string(b)
}

// requireEncodedForm checks the promises encodeKey makes about its output:
// no brace (the hash tag is exactly the encoded key), no '|' (the separator
// of waiter info and grant notices), only printable ASCII, and a round trip
// back to key. Injectivity follows from the round trip: decodeKey is a
// function, so two keys with one encoding would decode to the same key.
func requireEncodedForm(t *testing.T, key, enc string) {
	t.Helper()
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		require.Truef(t, c >= 0x21 && c <= 0x7e, "encodeKey(%q) = %q: byte %#x at %d is not printable ASCII", key, enc, c, i)
		require.NotContainsf(t, "{}|", string(c), "encodeKey(%q) = %q: %q at %d", key, enc, c, i)
	}
	dec, ok := decodeKey(enc)
	require.Truef(t, ok, "decodeKey(encodeKey(%q) = %q) not ok", key, enc)
	require.Equalf(t, key, dec, "decodeKey(encodeKey(%q) = %q)", key, enc)
}

func TestEncodeKeyOddKeys(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, key string
		want      string // "" means: only check the invariants
	}{
		{"plain", "user:1", "user:1"},
		{"braces", "{a}", "%7Ba%7D"},
		{"reversed braces", "}{", "%7D%7B"},
		{"brace inside", "a{b}", "a%7Bb%7D"},
		{"looks encoded", "a%7Bb%7D", "a%257Bb%257D"},
		{"percent", "%", "%25"},
		{"encoded brace", "%7B", "%257B"},
		{"NUL", "\x00", "%00"},
		{"NULs inside", "a\x00b\x00", "a%00b%00"},
		{"newline", "line\nbreak\r\n", "line%0Abreak%0D%0A"},
		{"space", "two words", "two%20words"},
		{"tab", "a\tb", "a%09b"},
		{"pipe", "a|b", "a%7Cb"},
		{"colon", "a:b::c", "a:b::c"},
		{"DEL", "\x7f", "%7F"},
		{"tilde and bang", "~!", "~!"},
		{"non-UTF-8", "\xff\xfe\x80", "%FF%FE%80"},
		{"UTF-8", "Grüße", "Gr%C3%BC%C3%9Fe"},
		{"hash tag of a user", "{user:1}:jobs", "%7Buser:1%7D:jobs"},
		{"long plain", strings.Repeat("k", batonlock.MaxKeyLen), strings.Repeat("k", batonlock.MaxKeyLen)},
		{"long braces", strings.Repeat("{}", batonlock.MaxKeyLen/2), strings.Repeat("%7B%7D", batonlock.MaxKeyLen/2)},
		{"every byte", allBytes(), ""},
		{"every byte, 16 times", strings.Repeat(allBytes(), 16), ""},
	}
	seen := make(map[string]string)
	for _, c := range cases {
		enc := encodeKey(c.key)
		if c.want != "" {
			require.Equalf(t, c.want, enc, "%s: encodeKey(%q)", c.name, c.key)
		}
		requireEncodedForm(t, c.key, enc)
		if other, dup := seen[enc]; dup {
			require.Failf(t, "encodings collide", "%q and %q both encode to %q", other, c.key, enc)
		}
		seen[enc] = c.key
	}
	// The pairs most likely to collide under a careless scheme.
	for _, pair := range [][2]string{
		{"a{b}", "a%7Bb%7D"},
		{"{a}", "a"},
		{"%", "%25"},
		{"\x00", "%00"},
		{"a|b", "a%7Cb"},
	} {
		require.NotEqualf(t, encodeKey(pair[0]), encodeKey(pair[1]), "%q and %q", pair[0], pair[1])
	}
}

// TestDecodeKeyRejects shows that decodeKey accepts only the one form
// encodeKey produces for a key, which is what makes the encoding injective.
func TestDecodeKeyRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		"{a}",     // raw brace
		"a}",      // raw brace
		"a|b",     // raw separator
		"a b",     // raw space
		"\x00",    // raw NUL
		"\xff",    // raw non-ASCII
		"%",       // truncated escape
		"%7",      // truncated escape
		"a%",      // truncated escape
		"%7b",     // lower-case hex: encodeKey writes upper case
		"%zz",     // not hex
		"%41",     // 'A' escaped although it needs no escape
		"%3A",     // ':' escaped although it needs no escape
		"ok%7Bx%", // good escape, then a truncated one
	} {
		k, ok := decodeKey(s)
		require.Falsef(t, ok, "decodeKey(%q) = %q, true; want not ok", s, k)
	}
	for _, s := range []string{"", "a", "a:b", "%25", "%7B%7D", "%00%FF", "~"} {
		k, ok := decodeKey(s)
		require.Truef(t, ok, "decodeKey(%q) not ok", s)
		require.Equal(t, s, encodeKey(k))
	}
}

func fuzzKeySeeds(f *testing.F) {
	for _, s := range []string{
		"", "a", "user:1", "{a}", "}{", "a{b}", "a%7Bb%7D", "%", "%7B", "%7b", "%%",
		"\x00", "a\x00b", "\n", "\r\n", " ", "a b", "|", "a|b|c", ":", "::",
		"\x7f", "\x80", "\xff\xfe", "Grüße", "%41", "%7", "a%",
		strings.Repeat("{", 300), allBytes(),
	} {
		f.Add(s)
	}
}

// FuzzEncodeKey checks the round trip and the form of every encoding. Without
// -fuzz, go test runs the seeds only, in well under a second.
func FuzzEncodeKey(f *testing.F) {
	fuzzKeySeeds(f)
	f.Fuzz(func(t *testing.T, key string) {
		enc := encodeKey(key)
		requireEncodedForm(t, key, enc)
		// Keys that need no escaping are used as they are, so that
		// ordinary keys read the same in redis-cli.
		if !needsEncoding(key) {
			require.Equal(t, key, enc)
		}
	})
}

// FuzzDecodeKey checks that decodeKey never panics and accepts exactly the
// strings encodeKey produces.
func FuzzDecodeKey(f *testing.F) {
	fuzzKeySeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		key, ok := decodeKey(s)
		if !ok {
			return
		}
		require.Equalf(t, s, encodeKey(key), "decodeKey(%q) = %q", s, key)
	})
}

// TestOddKeysAcrossCluster takes locks on odd keys on a 3-master Cluster:
// every script touches its keys and publishes on its channel in one slot (a
// script whose keys span slots fails with CROSSSLOT), and keys that differ
// only by braces or by an escape-looking spelling are separate locks.
func TestOddKeysAcrossCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := newClient(t, cluster.Addrs()...)
	d := newDriver(t, client)
	l, err := batonlock.New(d, &batonlock.Config{TTL: 10 * time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	keys := []string{
		"{a}", "a", "a{b}", "ab", "a%7Bb%7D", "}{", "{", "}", "%", "%7B",
		"{user:1}", "user:1", "with space", "nul\x00byte", "line\nbreak",
		"pipe|key", "colon:key:", "\xff\xfe", strings.Repeat("{x}", 200),
	}
	slots := make(map[int64]bool)
	leases := make([]*batonlock.Lease, 0, len(keys))
	for _, key := range keys {
		// Every name the lock's scripts touch, and its grant channel, is in
		// one slot.
		lk := d.lockKeys(key)
		names := append(append([]string(nil), lk.keys...), lk.channel+d.id)
		var slot int64 = -1
		for _, name := range names {
			s, err := client.Do(ctx, client.B().ClusterKeyslot().Key(name).Build()).AsInt64()
			require.NoError(t, err)
			if slot == -1 {
				slot = s
			}
			require.Equalf(t, slot, s, "key %q: %q is in slot %d, not %d", key, name, s, slot)
		}
		slots[slot] = true

		lease, err := l.TryAcquire(ctx, key, nil)
		require.NoErrorf(t, err, "key %q", key)
		leases = append(leases, lease)
		_, err = l.TryAcquire(ctx, key, nil)
		require.ErrorIsf(t, err, batonlock.ErrNotAcquired, "key %q is held", key)
	}
	// Every key was granted while all the others were held: keys differing
	// only by braces ("{a}"/"a", "{user:1}"/"user:1", "a{b}"/"ab") or by an
	// escape-looking spelling ("a{b}"/"a%7Bb%7D", "%"/"%7B") are distinct.
	require.Greater(t, len(slots), 1, "the keys should spread over several slots")
	t.Logf("%d odd keys over %d slots", len(keys), len(slots))

	// The blocking path: a waiter on an odd key is woken by the release's
	// SPUBLISH on the key's own shard channel.
	for i, key := range keys[:6] {
		got := make(chan error, 1)
		queued := make(chan struct{})
		go func() {
			lease, err := l.Acquire(ctx, key, &batonlock.AcquireOpts{OnWait: func(int) { close(queued) }})
			if err == nil {
				err = lease.Release(ctx)
			}
			got <- err
		}()
		select {
		case <-queued:
		case err := <-got:
			require.Failf(t, "waiter did not wait", "key %q: %v", key, err)
		case <-ctx.Done():
			require.FailNow(t, "waiter never queued")
		}
		require.NoError(t, leases[i].Release(ctx))
		select {
		case err := <-got:
			require.NoErrorf(t, err, "key %q", key)
		case <-time.After(5 * time.Second):
			require.FailNowf(t, "waiter not woken", "key %q", key)
		}
	}
	for _, lease := range leases[6:] {
		require.NoError(t, lease.Release(ctx))
	}
	for _, key := range keys {
		info, err := l.Inspect(ctx, key)
		require.NoError(t, err)
		require.Emptyf(t, info.Holders, "key %q", key)
		require.Zerof(t, info.WaiterCount, "key %q", key)
	}
}

package batonredis

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/internal/redistest"
)

// children are the roles this test binary plays when a test starts it again
// as a separate OS process with BATON_CHILD=name. Test files register theirs
// in init. A child returns its exit code.
var children = map[string]func() int{}

func TestMain(m *testing.M) { redistest.Main(m, children) }

// newClient returns a rueidis client for addrs (several for a cluster),
// closed when the test ends.
func newClient(tb testing.TB, addrs ...string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		tb.Fatalf("redis client for %v: %v", addrs, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// newDriver returns a Driver on client with a prefix of its own, so tests
// sharing a server never see each other's keys. Closed when the test ends.
func newDriver(tb testing.TB, client rueidis.Client) *Driver {
	tb.Helper()
	d, err := New(client, &Config{Prefix: "t" + randomHex(6)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(d.Close)
	return d
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

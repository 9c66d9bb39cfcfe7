package batonredis

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batondrivertest"
	"github.com/batonhq/baton/internal/redistest"
)

func TestConformanceStandalone(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedServer(t).Addr())
	batondrivertest.Exercise(t, func(t *testing.T) batondriver.LockDriver { return newDriver(t, client) })
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedCluster(t).Addrs()...)
	batondrivertest.Exercise(t, func(t *testing.T) batondriver.LockDriver { return newDriver(t, client) })
}

// New refuses a configuration it cannot honour, saying which field is wrong.
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedServer(t).Addr())
	_, err := New(nil, nil)
	require.ErrorContains(t, err, "nil client")
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Prefix: "a{b"}, "Prefix"},
		{Config{ListenerLinger: -time.Second}, "ListenerLinger"},
		{Config{LockIdleTTL: -time.Second}, "LockIdleTTL"},
		{Config{LockIdleTTL: time.Microsecond}, "LockIdleTTL"},
	} {
		_, err := New(client, &c.cfg)
		require.ErrorContains(t, err, c.want, "%+v", c.cfg)
	}
	d, err := New(client, &Config{LockIdleTTL: time.Millisecond})
	require.NoError(t, err, "the shortest idle TTL")
	d.Close()
}

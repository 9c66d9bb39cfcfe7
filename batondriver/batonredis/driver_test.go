package batonredis

import (
	"testing"

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

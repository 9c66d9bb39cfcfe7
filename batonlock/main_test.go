package batonlock_test

import (
	"fmt"
	"testing"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// backends runs fn once per backend, as parallel subtests.
func backends(t *testing.T, fn func(t *testing.T, d batondriver.LockDriver)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		fn(t, batonmem.New())
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		fn(t, redisDriver(t, redistest.SharedServer(t).Addr()))
	})
}

func redisDriver(t testing.TB, addrs ...string) *batonredis.Driver {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	d, err := batonredis.New(c, &batonredis.Config{Prefix: fmt.Sprintf("bl%p", t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

package batonredis

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/internal/keycheck"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The keyed execution checker (internal/keycheck) must catch a broken
// promotion: here, promote makes a parked job available without counting it
// among its key's holders — the "promoted but not counted" window of S12 —
// so a job inserted meanwhile is admitted beside it. The same workload on
// the real scripts must pass, or the checker would prove nothing.

type brokenArgs struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

func (brokenArgs) Kind() string { return "broken" }

// keyedWorkload runs two clients of 8 workers on d's backend while jobs of
// four keys of limit 1 are inserted about as fast as they run, so that
// their parked queues fill and drain, and returns the
// executions.
func keyedWorkload(t *testing.T, newDriver func() *Driver) []keycheck.Execution {
	var mu sync.Mutex
	var execs []keycheck.Execution
	opts := &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a brokenArgs) string { return a.Key }),
	}}
	var clients []*baton.Client
	for range 2 {
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[brokenArgs](func(ctx context.Context, job *baton.Job[brokenArgs]) error {
			e := keycheck.Execution{Job: job.ID, Key: job.Key, Fence: job.Fence, Start: lockcheck.Now()}
			time.Sleep(time.Duration(4+rand.IntN(9)) * time.Millisecond)
			e.End = lockcheck.Now()
			mu.Lock()
			execs = append(execs, e)
			mu.Unlock()
			return nil
		}), opts)
		c, err := baton.NewClient(newDriver(), &baton.Config{Workers: workers, Concurrency: 8, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		clients = append(clients, c)
	}
	const jobs = 400
	for i := range jobs {
		_, err := clients[0].Insert(t.Context(), brokenArgs{Key: fmt.Sprintf("k%d", i%4), N: i}, nil)
		require.NoError(t, err)
		time.Sleep(2 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(execs) >= jobs
	}, 20*time.Second, 10*time.Millisecond)
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		require.NoError(t, c.Stop(ctx))
		cancel()
	}
	return execs
}

var keyLimits = map[string]int{"k0": 1, "k1": 1, "k2": 1, "k3": 1}

func TestKeyedCheckerPassesRealScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.SharedServer(t)
	prefix := "t" + randomHex(6)
	execs := keyedWorkload(t, func() *Driver {
		d, err := New(newClient(t, srv.Addr()), &Config{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(d.Close)
		return d
	})
	require.NoError(t, keycheck.Check(execs, keyLimits))
}

func TestBrokenPromotionCaught(t *testing.T) {
	t.Parallel()
	const counted = "      redis.call('SADD', h, head)\n"
	require.Contains(t, luaJobLib, counted)
	broken := newScripts(strings.Replace(luaJobLib, counted, "", 1))
	srv := redistest.SharedServer(t)
	prefix := "t" + randomHex(6)
	execs := keyedWorkload(t, func() *Driver {
		d, err := New(newClient(t, srv.Addr()), &Config{Prefix: prefix})
		require.NoError(t, err)
		t.Cleanup(d.Close)
		d.scripts = broken
		return d
	})
	err := keycheck.Check(execs, keyLimits)
	require.Error(t, err, "the checker missed promotions that were not counted")
	require.Contains(t, err.Error(), "executions at once")
	t.Logf("caught, as it must be:\n%v", err)
}

package batonredis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
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

// keyedWorkload runs two clients of 8 workers on the backend newDriver
// opens, over rounds built to expose an uncounted promotion: each of four
// keys of limit 1 gets a job that runs and one that parks; as soon as the
// first ends (its finish promotes the second), each key gets a third job,
// inserted while the promoted one runs. Counted, the third parks; not
// counted, it is admitted beside the promoted one and both run at once.
// It returns the executions.
func keyedWorkload(t *testing.T, newDriver func() *Driver) []keycheck.Execution {
	var mu sync.Mutex
	var execs []keycheck.Execution
	ended := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(execs)
	}
	opts := &baton.WorkerOpts{Concurrency: &baton.ConcurrencyOpts{
		Key: baton.KeyOf(func(a brokenArgs) string { return a.Key }),
	}}
	var clients []*baton.Client
	for range 2 {
		workers := baton.NewWorkers()
		baton.AddWorker(workers, baton.WorkFunc[brokenArgs](func(ctx context.Context, job *baton.Job[brokenArgs]) error {
			e := keycheck.Execution{Job: job.ID, Key: job.Key, Fence: job.Fence, Start: lockcheck.Now()}
			time.Sleep(20 * time.Millisecond)
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
	insert := func(round, n int) {
		for k := range 4 {
			_, err := clients[0].Insert(t.Context(), brokenArgs{Key: fmt.Sprintf("k%d", k), N: round*10 + n}, nil)
			require.NoError(t, err)
		}
	}
	waitEnded := func(n int) {
		require.Eventually(t, func() bool { return ended() >= n }, 10*time.Second, time.Millisecond)
	}
	// The first jobs' finishes, which come after their handlers end, have
	// promoted (or chained) the second: none is parked. A third inserted
	// before that would park behind the second, and under the broken
	// promotion wait for ever once the uncounted second freed no slot.
	waitPromoted := func() {
		require.Eventually(t, func() bool {
			st, err := clients[0].QueueStats(t.Context(), "default")
			return err == nil && st.Counts[batondriver.JobStateParked] == 0
		}, 10*time.Second, time.Millisecond)
	}
	const rounds = 8
	for round := range rounds {
		base := ended()
		insert(round, 0) // runs
		insert(round, 1) // parks
		waitEnded(base + 4)
		waitPromoted()
		insert(round, 2) // while the promoted ones run
		waitEnded(base + 12)
	}
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
	const counted = "  if #promoted > 0 then chunked('SADD', h, promoted) end\n"
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

package batonredis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/internal/redistest"
)

// The memory backend must behave exactly like Redis (docs/concurrency.md).
// TestKeysLikeMemory runs the same random sequences of key transitions —
// inserts with keys, defaults, policies and unique keys, fetches and
// finishes with and without chains, every outcome, changed limits, deletes,
// admin retries and expired leases — on both and compares, after each step,
// what each call returned, every job's state, attempt and chain link, and
// every key's counts and KeyList order. Then it drains the queue and
// requires that Redis kept nothing of its keys. The sequences are
// deterministic on both backends: a lease meant to expire is the only one
// of its fetch (two expiring in the same ms are taken back in an order of
// the backend's), and nothing else happens until it has expired.
//
// BATON_DIFF_SEEDS and BATON_DIFF_STEPS run more and longer sequences: at
// the commit that added this test, 300 sequences of 100 steps passed, and
// 1500 of 150 before expired leases and KeyList were part of it.

// diffSide is one backend of the comparison, with its names for the jobs:
// ids[i] is the i-th job inserted, by index across both sides.
type diffSide struct {
	name   string
	d      batondriver.JobDriver
	ids    []string
	index  map[string]int
	leases map[int]string // running jobs' leases, by index
}

func (s *diffSide) add(id string) int {
	if i, ok := s.index[id]; ok {
		return i
	}
	s.ids = append(s.ids, id)
	s.index[id] = len(s.ids) - 1
	return len(s.ids) - 1
}

// norm describes rows by index: "i:state:attempt:after".
func (s *diffSide) norm(rows []*batondriver.JobRow) []string {
	out := []string{}
	for _, r := range rows {
		after := ""
		if r.After != "" {
			after = fmt.Sprint(s.index[r.After])
		}
		out = append(out, fmt.Sprintf("%d:%s:%d:%s", s.add(r.ID), r.State, r.Attempt, after))
		if r.State == batondriver.JobStateRunning {
			s.leases[s.index[r.ID]] = r.Lease
		}
	}
	return out
}

func TestKeysLikeMemory(t *testing.T) {
	t.Parallel()
	client := newClient(t, redistest.SharedServer(t).Addr())
	for seed := range diffSeeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rd := newDriver(t, client)
			queue := diffRun(t, seed, []*diffSide{
				{name: "memory", d: batonmem.New()},
				{name: "redis", d: rd},
			})
			// Drained, the queue keeps its meta hash and its name: every
			// key went idle and left nothing.
			require.Equal(t, []string{rd.prefix + ":queue:{" + queue + "}:meta", rd.queuesKey()}, scanKept(t, client, rd, time.Hour))
		})
	}
}

// diffRun runs sequence seed on sides, then drains the queue it used, and
// returns the queue's name.
func diffRun(t *testing.T, seed uint64, sides []*diffSide) string {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	queue := "q" + randomHex(4)
	keys := []string{"a", "b"}
	for _, s := range sides {
		s.index = map[string]int{}
		s.leases = map[int]string{}
	}
	var log []string
	// each runs op on both sides and requires the same description.
	each := func(what string, op func(s *diffSide) string) {
		t.Helper()
		log = append(log, what)
		var want string
		for i, s := range sides {
			got := op(s)
			if i == 0 {
				want = got
				continue
			}
			require.Equal(t, want, got, "step %d: %s\n%s differs from %s; steps:\n%s",
				len(log), what, s.name, sides[0].name, strings.Join(log, "\n"))
		}
	}
	jobs := 0
	for step := 0; step < diffSteps; step++ {
		switch op := rng.IntN(11); {
		case op == 10: // leases that expire, taken back
			max, chain, delay := 1, rng.IntN(2) == 0, time.Duration(rng.IntN(2))*time.Hour // one lease: the order of two expiring in the same ms is the backend's
			each(fmt.Sprintf("expire %d chain %v delay %v", max, chain, delay), func(s *diffSide) string {
				res, err := s.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: max, LeaseTTL: 20 * time.Millisecond,
					RecoverDelay: time.Hour, Chain: chain})
				require.NoError(t, err)
				got := fmt.Sprint(s.norm(res.Jobs))
				time.Sleep(60 * time.Millisecond)
				res, err = s.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, LeaseTTL: time.Hour, RecoverDelay: delay})
				require.NoError(t, err)
				return got + fmt.Sprint(" recovered ", res.Recovered)
			})
		case op < 3: // insert
			n := 1 + rng.IntN(3)
			var ins []*batondriver.JobInsert
			var desc []string
			for range n {
				j := &batondriver.JobInsert{Kind: "k", Args: []byte(`{}`), Priority: rng.IntN(2), MaxAttempts: 1 + rng.IntN(2),
					Key: keys[rng.IntN(len(keys))], Limit: 1 + rng.IntN(3)}
				switch rng.IntN(6) {
				case 0:
					j.OnBusy = batondriver.OnBusyDrop
				case 1:
					j.OnBusy, j.BusyDelay = batondriver.OnBusyReschedule, time.Hour
				case 2:
					j.OnBusy = batondriver.OnBusyFail
				}
				if rng.IntN(4) == 0 {
					j.Unique = &batondriver.JobUnique{Key: "u" + fmt.Sprint(rng.IntN(2)),
						Scope: []batondriver.UniqueScope{batondriver.UniqueQueued, batondriver.UniqueRunning, batondriver.UniqueUntilDone}[rng.IntN(3)]}
				}
				ins = append(ins, j)
				desc = append(desc, fmt.Sprintf("%s/%d/%s/p%d/m%d/%v", j.Key, j.Limit, j.OnBusy, j.Priority, j.MaxAttempts, j.Unique))
			}
			each("insert "+strings.Join(desc, " "), func(s *diffSide) string {
				res, err := s.d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: queue, Jobs: ins})
				require.NoError(t, err)
				var out []string
				for i, r := range res.Jobs {
					if r == nil {
						out = append(out, string(res.Status[i]))
						continue
					}
					out = append(out, string(res.Status[i])+"="+s.norm([]*batondriver.JobRow{r})[0])
				}
				return strings.Join(out, " ")
			})
			jobs += n
		case op < 5: // fetch
			max, chain := rng.IntN(3), rng.IntN(2) == 0
			each(fmt.Sprintf("fetch %d chain %v", max, chain), func(s *diffSide) string {
				res, err := s.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: max, LeaseTTL: time.Hour,
					RecoverDelay: time.Hour, Chain: chain})
				require.NoError(t, err)
				return fmt.Sprint(s.norm(res.Jobs), res.More)
			})
		case op < 8: // finish some running jobs
			var running []int
			for i := range sides[0].leases {
				running = append(running, i)
			}
			slices.Sort(running)
			if len(running) == 0 {
				continue
			}
			rng.Shuffle(len(running), func(i, k int) { running[i], running[k] = running[k], running[i] })
			running = running[:1+rng.IntN(len(running))]
			outcomes := []batondriver.JobOutcome{batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry,
				batondriver.JobOutcomeSnooze, batondriver.JobOutcomeAgain, batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead}
			type fin struct {
				i        int
				o        batondriver.JobOutcome
				later    bool
				unchain  bool
				giveBack bool // a Snooze until now from a stopping client
			}
			var fs []fin
			var desc []string
			for _, i := range running {
				f := fin{i: i, o: outcomes[rng.IntN(len(outcomes))], later: rng.IntN(3) == 0, unchain: rng.IntN(4) == 0}
				if f.o == batondriver.JobOutcomeSnooze && !f.later && rng.IntN(2) == 0 {
					f.giveBack, f.unchain = true, false
				}
				fs = append(fs, f)
				desc = append(desc, fmt.Sprintf("%d:%s:later=%v:unchain=%v:giveback=%v", f.i, f.o, f.later, f.unchain, f.giveBack))
			}
			var fetch *batondriver.JobFinishFetch
			if rng.IntN(2) == 0 {
				fetch = &batondriver.JobFinishFetch{Max: 1 + rng.IntN(2), LeaseTTL: time.Hour}
			}
			chain := rng.IntN(2) == 0
			retention := time.Duration(rng.IntN(2)) * time.Hour
			each(fmt.Sprintf("finish %s fetch %v chain %v retention %v", strings.Join(desc, " "), fetch != nil, chain, retention),
				func(s *diffSide) string {
					var p []*batondriver.JobFinish
					for _, f := range fs {
						var at time.Time
						if f.later {
							at = time.Now().Add(time.Hour)
						}
						p = append(p, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: s.ids[f.i], Lease: s.leases[f.i]},
							Outcome: f.o, Error: "x", RunAt: at, Unchain: f.unchain, GiveBack: f.giveBack})
					}
					res, err := s.d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Finished: p, Retention: retention,
						Fetch: fetch, Chain: chain})
					require.NoError(t, err)
					var stale []int
					for _, id := range res.Stale {
						stale = append(stale, s.index[id])
					}
					return fmt.Sprint(stale, s.norm(res.Jobs))
				})
		case op < 9: // change a limit
			k, n, reset := keys[rng.IntN(len(keys))], rng.IntN(4), rng.IntN(3) == 0
			each(fmt.Sprintf("setlimit %s %d reset %v", k, n, reset), func(s *diffSide) string {
				info, err := s.d.(batondriver.KeyDriver).KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: queue, Key: k, Limit: n, Reset: reset})
				require.NoError(t, err)
				return fmt.Sprint(info.Holding, info.Running, info.Chained, info.Parked, info.Limit)
			})
		default: // delete or retry a job
			if jobs == 0 {
				continue
			}
			i, del := rng.IntN(len(sides[0].ids)), rng.IntN(2) == 0
			each(fmt.Sprintf("delete %v %d", del, i), func(s *diffSide) string {
				p := &batondriver.JobGetParams{Queue: queue, ID: s.ids[i]}
				if del {
					err := s.d.JobDelete(ctx, p)
					return errKind(err)
				}
				r, err := s.d.JobRetry(ctx, p)
				if err != nil {
					return errKind(err)
				}
				return s.norm([]*batondriver.JobRow{r})[0]
			})
		}
		// Compare every job and key.
		each("compare", func(s *diffSide) string {
			var out []string
			for i, id := range s.ids {
				r, err := s.d.JobGet(ctx, &batondriver.JobGetParams{Queue: queue, ID: id})
				if err != nil {
					out = append(out, fmt.Sprintf("%d:%s", i, errKind(err)))
					delete(s.leases, i)
					continue
				}
				if r.State != batondriver.JobStateRunning {
					delete(s.leases, i)
				}
				out = append(out, s.norm([]*batondriver.JobRow{r})[0])
			}
			for _, k := range keys {
				info, err := s.d.(batondriver.KeyDriver).KeyGet(ctx, &batondriver.KeyParams{Queue: queue, Key: k})
				if err != nil {
					out = append(out, k+":"+errKind(err))
					continue
				}
				var hs []string
				for _, h := range info.Holders {
					next := ""
					if h.Next != "" {
						next = fmt.Sprint(s.index[h.Next])
					}
					hs = append(hs, fmt.Sprintf("%d>%s", s.index[h.ID], next))
				}
				slices.Sort(hs)
				out = append(out, fmt.Sprintf("%s: limit %d override %v holding %d running %d chained %d parked %d %v",
					k, info.Limit, info.Override, info.Holding, info.Running, info.Chained, info.Parked, hs))
			}
			st, err := s.d.QueueStats(ctx, &batondriver.QueueParams{Queue: queue})
			require.NoError(t, err)
			out = append(out, fmt.Sprint(st.Counts, st.Keys, st.Dropped))
			kl, err := s.d.(batondriver.KeyDriver).KeyList(ctx, &batondriver.KeyListParams{Queue: queue})
			require.NoError(t, err)
			for _, info := range kl.Keys {
				out = append(out, fmt.Sprintf("listed %s: parked %d chained %d", info.Key, info.Parked, info.Chained))
			}
			return strings.Join(out, "\n")
		})
	}
	// Drain: no override, every job run to completion (deleted at once),
	// chained ones too, and the jobs that cannot run deleted.
	each("drain", func(s *diffSide) string {
		for _, k := range keys {
			_, err := s.d.(batondriver.KeyDriver).KeySetLimit(ctx, &batondriver.KeySetLimitParams{Queue: queue, Key: k, Reset: true})
			require.NoError(t, err)
		}
		for range 1000 {
			res, err := s.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: 10, LeaseTTL: time.Hour, Chain: true})
			require.NoError(t, err)
			s.norm(res.Jobs)
			if len(s.leases) == 0 {
				break
			}
			var fs []*batondriver.JobFinish
			for i, l := range s.leases {
				fs = append(fs, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: s.ids[i], Lease: l}, Outcome: batondriver.JobOutcomeCompleted})
			}
			fin, err := s.d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Finished: fs})
			require.NoError(t, err)
			require.Empty(t, fin.Stale)
			clear(s.leases)
		}
		for _, id := range s.ids {
			err := s.d.JobDelete(ctx, &batondriver.JobGetParams{Queue: queue, ID: id})
			if !errors.Is(err, batondriver.ErrJobNotFound) {
				require.NoError(t, err)
			}
		}
		st, err := s.d.QueueStats(ctx, &batondriver.QueueParams{Queue: queue})
		require.NoError(t, err)
		return fmt.Sprint(st.Counts, st.Keys)
	})
	return queue
}

func errKind(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, batondriver.ErrJobNotFound):
		return "notfound"
	case errors.Is(err, batondriver.ErrKeyNotFound):
		return "keynotfound"
	case errors.Is(err, batondriver.ErrBadParams):
		return "badparams"
	}
	return err.Error()
}

// The size of TestKeysLikeMemory: sequences and steps in each.
var diffSeeds, diffSteps = uint64(envInt("BATON_DIFF_SEEDS", 20)), envInt("BATON_DIFF_STEPS", 60)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

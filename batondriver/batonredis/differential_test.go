package batonredis

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// TestKeysLikeMemory runs the same random sequences of transitions on both
// and compares, after each step, what each call returned and the whole
// visible state. The steps:
//
//   - inserts, in batches of one to four (twins inside one batch
//     included), of jobs with a concurrency key or none, each key's
//     default limit and OnBusy policy, priorities, tags and metadata, args
//     that tell the inserts apart, RunAt now or some hours ahead, and
//     unique keys of every scope (a period's lasting longer than the test)
//     with every conflict answer (the default, return existing, replace —
//     args and, for a delayed insert and a scheduled twin, RunAt — and
//     reject), some once per tick of a schedule, and what each insert
//     replied, Reason included;
//   - fetches, with and without chains, fetches whose leases expire and
//     are taken back (with a RecoverDelay of 0 or an hour), and fetches
//     that admit keyed jobs come due (their OnBusy policy applying);
//   - finishes with every outcome (Retry, Snooze and Again now or some
//     hours ahead), Unchain, GiveBack, and with and without Fetch, Chain
//     and a retention, and now and then an outcome with a stale lease;
//   - extensions of leases held and stale;
//   - changed limits, pause and resume (fetches and finishes' fetches
//     while paused), deletes and admin retries of any job (scheduled ones
//     included).
//
// After each step it compares every job as JobGet returns it — state,
// attempt, chain link, kind, args, priority, tags, metadata, key, limit,
// policy, unique key and scope, runs, RunAt (in hours from the start),
// errors, LeaseUntil in hours, which other times and leases are set, and
// the step that gave each fence (fences rising from step to step) —
// every key's counts and holders, QueueStats, KeyList in order and a page
// of it, and JobList of each state and a page of each: the available jobs
// in fetch order, the others as a set (their order ties on times of the
// backend's own), with totals.
// Then it drains the queue and requires that Redis kept nothing of its
// keys but period claims. The sequences are deterministic on both
// backends: every time given is whole hours from the start, or an hour or
// more from now; a lease meant to expire is the only one of its fetch (two
// expiring in the same ms are taken back in an order of the backend's),
// and nothing else happens until it has expired; likewise nothing happens
// between the insert of jobs due in 100ms and the fetch that admits them.
//
// BATON_DIFF_SEEDS and BATON_DIFF_STEPS run more and longer sequences
// (default 20 of 60 steps; make chaos runs 300 of 100). At the commit that
// compared whole rows and added more transitions, 300 sequences of 100
// steps passed, and 100 of 200; with jobs come due, 300 of 60 (make chaos,
// which set no BATON_DIFF_STEPS then); at the commit that set it to 100,
// 30 of 100 by hand. Before all these, 300 of 100, and 1500 of 150 before
// expired leases and KeyList were part of it.

// diffSide is one backend of the comparison, with its names for the jobs:
// ids[i] is the i-th job inserted, by index across both sides.
type diffSide struct {
	name   string
	d      batondriver.JobDriver
	ids    []string
	index  map[string]int
	leases map[int]string // running jobs' leases, by index
	old    map[int]string // every job's last lease, by index: stale once it no longer runs
	t0     time.Time      // the start of the sequence, whole ms
	// fenceAt is the step at which each fencing token was first seen: the
	// call that leased with it. The order of the tokens of one call is
	// the backend's (Redis gives a chained job its token right after the
	// job ahead's, memory after all the call's leases'), that of calls is
	// not.
	fenceAt map[int64]int
	step    int
}

func (s *diffSide) add(id string) int {
	if i, ok := s.index[id]; ok {
		return i
	}
	s.ids = append(s.ids, id)
	s.index[id] = len(s.ids) - 1
	return len(s.ids) - 1
}

// ref names job id by its index, or "" for "".
func (s *diffSide) ref(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprint(s.add(id))
}

// hours is t in whole hours from the start, "-" for the zero time.
func (s *diffSide) hours(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return fmt.Sprint(int64(t.Sub(s.t0).Round(time.Hour) / time.Hour))
}

// norm describes rows by index: "i:state:attempt:after".
func (s *diffSide) norm(rows []*batondriver.JobRow) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%d:%s:%d:%s", s.add(r.ID), r.State, r.Attempt, s.ref(r.After)))
		if _, ok := s.fenceAt[r.Fence]; r.Fence != 0 && !ok {
			s.fenceAt[r.Fence] = s.step
		}
		if r.State == batondriver.JobStateRunning {
			s.leases[s.index[r.ID]] = r.Lease
			s.old[s.index[r.ID]] = r.Lease
		}
	}
	return out
}

// full describes a row whole, but for what differs between any two
// backends (IDs, times, leases, fences): those by index, in hours from the
// start, or as set or not.
func (s *diffSide) full(r *batondriver.JobRow) string {
	var errs []string
	for _, e := range r.Errors {
		errs = append(errs, fmt.Sprintf("%d:%s:%v", e.Attempt, e.Error, !e.At.IsZero()))
	}
	set := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	return fmt.Sprintf("%s %s/%s p%d m%d args=%s tags=%q meta=%s key=%s/%d/%s unique=%s/%s runs=%d runat=%s errors=%v"+
		" created=%s attempted=%s finished=%s parked=%s lease=%s until=%s fence=%s",
		s.norm([]*batondriver.JobRow{r})[0], r.Queue, r.Kind, r.Priority, r.MaxAttempts, r.Args, r.Tags, r.Metadata,
		r.Key, r.Limit, r.OnBusy, r.Unique, r.UniqueScope, r.Runs, s.hours(r.RunAt), errs,
		set(!r.CreatedAt.IsZero()), set(!r.AttemptedAt.IsZero()), set(!r.FinishedAt.IsZero()), set(!r.ParkedAt.IsZero()),
		set(r.Lease != ""), s.hours(r.LeaseUntil), set(r.Fence != 0))
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
			// Drained, the queue keeps its meta hash and its name, and
			// the unique claims of periods not over: every key went idle
			// and left nothing.
			base := rd.prefix + ":queue:{" + queue + "}:"
			kept := slices.DeleteFunc(scanKept(t, client, rd, time.Hour), func(k string) bool {
				return k == base+"unique" || k == base+"unique_periods"
			})
			require.Equal(t, []string{base + "meta", rd.queuesKey()}, kept)
		})
	}
}

// diffRun runs sequence seed on sides, then drains the queue it used, and
// returns the queue's name.
func diffRun(t *testing.T, seed uint64, sides []*diffSide) string {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	queue := "q" + randomHex(4)
	keys := []string{"a", "b\t\"\n\\é\x01"}
	t0 := time.Now().Truncate(time.Millisecond)
	for _, s := range sides {
		s.index = map[string]int{}
		s.leases = map[int]string{}
		s.fenceAt = map[int64]int{}
		s.old = map[int]string{}
		s.t0 = t0
	}
	var log []string
	// each runs op on both sides and requires the same description.
	each := func(what string, op func(s *diffSide) string) {
		t.Helper()
		log = append(log, what)
		var want string
		for i, s := range sides {
			s.step = len(log)
			got := op(s)
			if i == 0 {
				want = got
				continue
			}
			require.Equal(t, want, got, "step %d: %s\n%s differs from %s; steps:\n%s",
				len(log), what, s.name, sides[0].name, strings.Join(log, "\n"))
		}
	}
	// at is whole hours from the start: exact on every backend.
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	jobs, paused := 0, false
	for step := 0; step < diffSteps; step++ {
		op := rng.IntN(14)
		if op == 10 && rng.IntN(3) == 0 {
			op = 14 // the other step that sleeps, a third of the time
		}
		switch {
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
				return got + fmt.Sprint(" recovered ", res.Recovered, " paused ", res.Paused, " next ", s.hours(res.NextRunAt))
			})
		case op == 13: // extend leases, some of them stale
			var ls []int
			for _, i := range slices.Sorted(maps.Keys(sides[0].old)) { // in order: a seed replays
				if rng.IntN(2) == 0 {
					ls = append(ls, i)
				}
			}
			if len(ls) == 0 {
				continue
			}
			each(fmt.Sprintf("extend %v", ls), func(s *diffSide) string {
				var p []batondriver.JobLease
				for _, i := range ls {
					p = append(p, batondriver.JobLease{ID: s.ids[i], Lease: s.old[i]})
				}
				res, err := s.d.JobExtend(ctx, &batondriver.JobExtendParams{Queue: queue, Leases: p, TTL: 2 * time.Hour})
				require.NoError(t, err)
				var lost []string
				for _, id := range res.Lost {
					lost = append(lost, s.ref(id))
				}
				return fmt.Sprint(lost)
			})
		case op == 14: // keyed jobs delayed a moment, admitted when due
			var ins []*batondriver.JobInsert
			var desc []string
			for range 1 + rng.IntN(2) {
				j := &batondriver.JobInsert{Kind: "k", Args: []byte(fmt.Sprintf(`{"n":%d}`, step*10+len(ins))),
					Priority: rng.IntN(3), MaxAttempts: 1 + rng.IntN(3), Key: keys[rng.IntN(len(keys))], Limit: 1 + rng.IntN(2),
					OnBusy: []batondriver.OnBusy{batondriver.OnBusyWait, batondriver.OnBusyDrop, batondriver.OnBusyFail}[rng.IntN(3)]}
				if rng.IntN(4) == 0 {
					j.OnBusy, j.BusyDelay = batondriver.OnBusyReschedule, 100*time.Hour
				}
				ins = append(ins, j)
				desc = append(desc, fmt.Sprintf("%s/%d/%s", j.Key, j.Limit, j.OnBusy))
			}
			each("due "+strings.Join(desc, " "), func(s *diffSide) string {
				// Due 100ms from now on each side (the insert must run
				// before: 30ms was not always enough on a busy machine),
				// and nothing else happens until the fetch that admits
				// them.
				due := time.Now().Add(100 * time.Millisecond)
				for _, j := range ins {
					j.RunAt = due
				}
				res, err := s.d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: queue, Jobs: ins})
				require.NoError(t, err)
				if !time.Now().Before(due) {
					// The jobs were due as they were inserted, and admitted
					// at once: the sides would differ by the machine's load.
					t.Skipf("step %d: the insert on %s returned after the jobs were due: too busy a machine for this seed", s.step, s.name)
				}
				var out []string
				for i, r := range res.Jobs {
					out = append(out, fmt.Sprintf("%s=%s", res.Status[i], s.norm([]*batondriver.JobRow{r})[0]))
				}
				time.Sleep(time.Until(due) + 30*time.Millisecond)
				fr, err := s.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, LeaseTTL: time.Hour, RecoverDelay: time.Hour})
				require.NoError(t, err)
				return fmt.Sprint(out, " recovered ", fr.Recovered, " next ", s.hours(fr.NextRunAt))
			})
			jobs += len(ins)
		case op == 11: // pause or resume
			paused = !paused
			each(fmt.Sprintf("pause %v", paused), func(s *diffSide) string {
				return errKind(s.d.QueuePause(ctx, &batondriver.QueuePauseParams{Queue: queue, Resume: !paused}))
			})
		case op < 3 || op == 12: // insert
			n := 1 + rng.IntN(4)
			var ins []*batondriver.JobInsert
			var desc []string
			for range n {
				j := &batondriver.JobInsert{Kind: "k", Args: []byte(fmt.Sprintf(`{"n":%d}`, step*10+len(ins))),
					Priority: rng.IntN(3), MaxAttempts: 1 + rng.IntN(3)}
				if rng.IntN(4) != 0 {
					j.Key, j.Limit = keys[rng.IntN(len(keys))], 1+rng.IntN(3)
					switch rng.IntN(6) {
					case 0:
						j.OnBusy = batondriver.OnBusyDrop
					case 1:
						j.OnBusy, j.BusyDelay = batondriver.OnBusyReschedule, 100*time.Hour
					case 2:
						j.OnBusy = batondriver.OnBusyFail
					case 3:
						j.OnBusy = batondriver.OnBusyWait
					}
				}
				if rng.IntN(4) == 0 {
					j.RunAt = at(1 + rng.IntN(3))
				}
				switch rng.IntN(4) {
				case 0:
					j.Tags = []string{"t" + fmt.Sprint(rng.IntN(2)), "x"}
				case 1:
					j.Tags = []string{}
				}
				if rng.IntN(3) == 0 {
					j.Metadata = []byte(fmt.Sprintf(`{"m":%d}`, rng.IntN(3)))
				}
				if rng.IntN(3) == 0 {
					j.Unique = &batondriver.JobUnique{Key: "u" + fmt.Sprint(rng.IntN(2)),
						Scope: []batondriver.UniqueScope{batondriver.UniqueQueued, batondriver.UniqueRunning,
							batondriver.UniqueUntilDone, batondriver.UniquePeriod}[rng.IntN(4)],
						OnConflict: []batondriver.UniqueConflict{"", batondriver.UniqueReturnExisting,
							batondriver.UniqueReplace, batondriver.UniqueReject}[rng.IntN(4)]}
					if j.Unique.Scope == batondriver.UniquePeriod {
						j.Unique.Period = 100 * time.Hour
						if rng.IntN(2) == 0 { // rarer: it claims its key for good
							j.Unique.Scope = batondriver.UniqueUntilDone
						}
					}
				}
				ins = append(ins, j)
				desc = append(desc, fmt.Sprintf("%s/%d/%s/p%d/m%d/at%s/%v", j.Key, j.Limit, j.OnBusy, j.Priority, j.MaxAttempts,
					sides[0].hours(j.RunAt), j.Unique))
			}
			var once *batondriver.JobInsertOnce
			if rng.IntN(6) == 0 {
				once = &batondriver.JobInsertOnce{Name: "s", Tick: at(rng.IntN(4))}
				desc = append(desc, fmt.Sprint("once ", sides[0].hours(once.Tick)))
			}
			each("insert "+strings.Join(desc, " "), func(s *diffSide) string {
				res, err := s.d.JobInsert(ctx, &batondriver.JobInsertParams{Queue: queue, Jobs: ins, Once: once})
				require.NoError(t, err)
				out := []string{fmt.Sprint("skipped ", res.Skipped)}
				for i, r := range res.Jobs {
					reason := res.Reason[i]
					if id, ok := strings.CutPrefix(reason, "duplicate of "); ok {
						reason = "duplicate of " + s.ref(id)
					}
					if r == nil {
						out = append(out, fmt.Sprintf("%s(%s)", res.Status[i], reason))
						continue
					}
					out = append(out, fmt.Sprintf("%s(%s)=%s", res.Status[i], reason, s.full(r)))
				}
				return strings.Join(out, "\n")
			})
			jobs += n
		case op < 5: // fetch
			max, chain := rng.IntN(3), rng.IntN(2) == 0
			each(fmt.Sprintf("fetch %d chain %v", max, chain), func(s *diffSide) string {
				res, err := s.d.JobFetch(ctx, &batondriver.JobFetchParams{Queue: queue, Max: max, LeaseTTL: time.Hour,
					RecoverDelay: time.Hour, Chain: chain})
				require.NoError(t, err)
				var out []string
				for _, r := range res.Jobs {
					out = append(out, s.full(r))
				}
				return fmt.Sprint(out, " more ", res.More, " paused ", res.Paused, " recovered ", res.Recovered,
					" next ", s.hours(res.NextRunAt))
			})
		case op < 8: // finish some running jobs
			var running []int
			for i := range sides[0].leases {
				running = append(running, i)
			}
			if len(running) == 0 {
				continue
			}
			// Now and then an outcome with a lease no longer held.
			for _, i := range slices.Sorted(maps.Keys(sides[0].old)) { // in order: a seed replays
				if _, ok := sides[0].leases[i]; !ok && rng.IntN(8) == 0 {
					running = append(running, i)
				}
			}
			slices.Sort(running)
			rng.Shuffle(len(running), func(i, k int) { running[i], running[k] = running[k], running[i] })
			running = running[:1+rng.IntN(len(running))]
			outcomes := []batondriver.JobOutcome{batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry,
				batondriver.JobOutcomeSnooze, batondriver.JobOutcomeAgain, batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead}
			type fin struct {
				i        int
				o        batondriver.JobOutcome
				later    int // RunAt in hours from the start; 0 for now
				unchain  bool
				giveBack bool // a Snooze until now from a stopping client
			}
			var fs []fin
			var desc []string
			for _, i := range running {
				f := fin{i: i, o: outcomes[rng.IntN(len(outcomes))], unchain: rng.IntN(4) == 0}
				if rng.IntN(3) == 0 {
					f.later = 1 + rng.IntN(3)
				}
				if f.o == batondriver.JobOutcomeSnooze && f.later == 0 && rng.IntN(2) == 0 {
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
						var runAt time.Time
						if f.later > 0 {
							runAt = at(f.later)
						}
						p = append(p, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: s.ids[f.i], Lease: s.old[f.i]},
							Outcome: f.o, Error: "x", RunAt: runAt, Unchain: f.unchain, GiveBack: f.giveBack})
					}
					res, err := s.d.JobFinish(ctx, &batondriver.JobFinishParams{Queue: queue, Finished: p, Retention: retention,
						Fetch: fetch, Chain: chain})
					require.NoError(t, err)
					var stale []int
					for _, id := range res.Stale {
						stale = append(stale, s.index[id])
					}
					var out []string
					for _, r := range res.Jobs {
						out = append(out, s.full(r))
					}
					return fmt.Sprint(stale, out)
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
			i, del := rng.IntN(len(sides[0].ids)), rng.IntN(3) == 0
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
				return s.full(r)
			})
		}
		// Compare every job and key.
		each("compare", func(s *diffSide) string {
			var out []string
			var fences []int64
			fenceOf := map[int]int64{}
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
				if r.Fence != 0 {
					fences = append(fences, r.Fence)
					fenceOf[i] = r.Fence
				}
				out = append(out, s.full(r))
			}
			// The fences: by job, the step that leased with it; and they
			// rise from step to step.
			slices.Sort(fences)
			for i := 1; i < len(fences); i++ {
				require.LessOrEqual(t, s.fenceAt[fences[i-1]], s.fenceAt[fences[i]], "%s: a fence below one of an earlier step", s.name)
			}
			var ats []string
			for i := range s.ids {
				if f, ok := fenceOf[i]; ok {
					ats = append(ats, fmt.Sprintf("%d:%d", i, s.fenceAt[f]))
				}
			}
			out = append(out, fmt.Sprint("fences ", ats))
			for _, k := range keys {
				info, err := s.d.(batondriver.KeyDriver).KeyGet(ctx, &batondriver.KeyParams{Queue: queue, Key: k})
				if err != nil {
					out = append(out, k+":"+errKind(err))
					continue
				}
				var hs []string
				for _, h := range info.Holders {
					hs = append(hs, fmt.Sprintf("%s:%s>%s", s.ref(h.ID), h.State, s.ref(h.Next)))
				}
				slices.Sort(hs)
				out = append(out, fmt.Sprintf("%s: limit %d override %v holding %d running %d chained %d parked %d oldest %v fence %v %v",
					k, info.Limit, info.Override, info.Holding, info.Running, info.Chained, info.Parked,
					!info.OldestParked.IsZero(), info.Fence != 0, hs))
			}
			st, err := s.d.QueueStats(ctx, &batondriver.QueueParams{Queue: queue})
			require.NoError(t, err)
			out = append(out, fmt.Sprint(st.Counts, st.Keys, st.Dropped, st.Paused, !st.OldestAvailable.IsZero()))
			kl, err := s.d.(batondriver.KeyDriver).KeyList(ctx, &batondriver.KeyListParams{Queue: queue})
			require.NoError(t, err)
			out = append(out, fmt.Sprint("keys ", kl.Total))
			for _, info := range kl.Keys {
				out = append(out, fmt.Sprintf("listed %s: limit %d override %v holding %d running %d parked %d chained %d",
					info.Key, info.Limit, info.Override, info.Holding, info.Running, info.Parked, info.Chained))
			}
			// Every state's list: the available jobs in fetch order, the
			// others as a set, since they tie on times of the backend's.
			for _, state := range batondriver.JobStates {
				res, err := s.d.JobList(ctx, &batondriver.JobListParams{Queue: queue, State: state})
				require.NoError(t, err)
				var listed []string
				for _, r := range res.Jobs {
					require.Equal(t, state, r.State)
					listed = append(listed, s.ref(r.ID))
				}
				if state != batondriver.JobStateAvailable {
					slices.Sort(listed)
				}
				out = append(out, fmt.Sprintf("list %s %d %v", state, res.Total, listed))
				page, err := s.d.JobList(ctx, &batondriver.JobListParams{Queue: queue, State: state, Limit: 2, Offset: 1})
				require.NoError(t, err)
				want := []string{}
				if state == batondriver.JobStateAvailable && len(listed) > 1 {
					want = listed[1:min(3, len(listed))]
				}
				got := []string{}
				for _, r := range page.Jobs {
					if state == batondriver.JobStateAvailable {
						got = append(got, s.ref(r.ID))
					}
				}
				require.Equal(t, want, got, "%s: page 2 of 2 of the available jobs", s.name)
				out = append(out, fmt.Sprintf("page %s %d %d", state, page.Total, len(page.Jobs)))
			}
			kp, err := s.d.(batondriver.KeyDriver).KeyList(ctx, &batondriver.KeyListParams{Queue: queue, Limit: 1, Offset: 1})
			require.NoError(t, err)
			out = append(out, fmt.Sprint("keys page ", kp.Total, len(kp.Keys)))
			for _, info := range kp.Keys {
				out = append(out, "page key "+info.Key)
			}
			return strings.Join(out, "\n")
		})
	}
	// Drain: resumed, no override, every job run to completion (deleted at
	// once), chained ones too, and the jobs that cannot run deleted.
	each("drain", func(s *diffSide) string {
		require.NoError(t, s.d.QueuePause(ctx, &batondriver.QueuePauseParams{Queue: queue, Resume: true}))
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
			for _, i := range slices.Sorted(maps.Keys(s.leases)) {
				fs = append(fs, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: s.ids[i], Lease: s.leases[i]}, Outcome: batondriver.JobOutcomeCompleted})
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

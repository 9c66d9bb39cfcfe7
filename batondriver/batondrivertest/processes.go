package batondrivertest

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
)

// The registry of live processes (batondriver.ProcessDriver). It is one per
// backend namespace, so these tests need a driver of their own each (see
// ExerciseJobs).

// beat records p for ttl and returns the result.
func (f *jobFixture) beat(p batondriver.ProcessRecord, ttl time.Duration) *batondriver.ProcessBeatResult {
	f.t.Helper()
	res, err := f.d.ProcessBeat(f.ctx, &batondriver.ProcessBeatParams{ProcessRecord: p, TTL: ttl})
	require.NoError(f.t, err)
	return res
}

// processes lists the live processes and checks the listing's own rules:
// not nil, sorted, every record expiring after the listing's time.
func (f *jobFixture) processes() []*batondriver.Process {
	f.t.Helper()
	res, err := f.d.ProcessList(f.ctx)
	require.NoError(f.t, err)
	require.NotNil(f.t, res.Processes)
	requireNear(f.t, time.Now(), res.Now, clockSlack)
	for _, p := range res.Processes {
		require.True(f.t, p.ExpiresAt.After(res.Now), "process %q listed at %v expired at %v", p.ID, res.Now, p.ExpiresAt)
	}
	return res.Processes
}

// processIDs are the IDs of ps, in order.
func processIDs(ps []*batondriver.Process) []string {
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// newProcess returns a record of ID id with every field set.
func newProcess(id string) batondriver.ProcessRecord {
	return batondriver.ProcessRecord{
		ID: id, Name: "billing", Host: "host-1", PID: 4242, Version: "v1.2.3",
		Queues:      []batondriver.ProcessQueue{{Name: "critical", Weight: 6, MaxWorkers: 10}, {Name: "default", Weight: 3}, {Name: "low", Weight: 1}},
		Concurrency: 50, Busy: 3,
	}
}

// withProcess returns newProcess(id) changed by set.
func withProcess(id string, set func(p *batondriver.ProcessRecord)) batondriver.ProcessRecord {
	p := newProcess(id)
	set(&p)
	return p
}

func exerciseProcesses(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("BeatAndList", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		require.Empty(t, f.processes(), "a backend nobody beat on")
		now := time.Now()
		a := newProcess("a")
		b := withProcess("b", func(p *batondriver.ProcessRecord) {
			p.Name, p.Host, p.PID, p.Version = "", "host-0", 7, ""
			p.Queues = []batondriver.ProcessQueue{{Name: "mail"}}
			p.StrictPriority, p.Concurrency, p.Busy, p.Stopping = true, 1, 0, true
		})
		res := f.beat(a, time.Hour)
		require.True(t, res.Created, "a new record")
		requireNear(t, now, res.Now, clockSlack)
		require.True(t, f.beat(b, time.Minute).Created)

		ps := f.processes()
		require.Equal(t, []string{"b", "a"}, processIDs(ps), "by host")
		require.Equal(t, b, ps[0].ProcessRecord, "every field kept")
		require.Equal(t, a, ps[1].ProcessRecord, "every field kept")
		for i, ttl := range []time.Duration{time.Minute, time.Hour} {
			p := ps[i]
			requireNear(t, now, p.StartedAt, clockSlack)
			requireNear(t, p.StartedAt, p.SeenAt, storeSlack)
			requireNear(t, p.SeenAt.Add(ttl), p.ExpiresAt, storeSlack)
		}
		requireNear(t, res.Now, ps[1].SeenAt, storeSlack, "the beat's time is the record's")
	})

	t.Run("Order", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		for _, p := range []struct {
			id, host string
			pid      int
		}{{"z", "b", 2}, {"y", "a", 3}, {"x2", "a", 10}, {"x1", "a", 10}, {"w", "a", 100}} {
			f.beat(withProcess(p.id, func(r *batondriver.ProcessRecord) { r.Host, r.PID = p.host, p.pid }), time.Hour)
		}
		require.Equal(t, []string{"y", "x1", "x2", "w", "z"}, processIDs(f.processes()),
			"by host, then PID (a number: 3 before 10 before 100), then ID")
	})

	t.Run("BeatRenews", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.beat(newProcess("p"), time.Hour)
		first := f.processes()[0]
		time.Sleep(20 * time.Millisecond)
		changed := withProcess("p", func(p *batondriver.ProcessRecord) {
			p.Name, p.Version, p.Busy, p.Concurrency, p.Stopping = "other", "v1.2.4", 49, 60, true
			p.Queues = []batondriver.ProcessQueue{{Name: "only", Weight: 2, MaxWorkers: 5}}
			p.StrictPriority = true
		})
		res := f.beat(changed, 2*time.Hour)
		require.False(t, res.Created, "a live record is renewed")
		ps := f.processes()
		require.Len(t, ps, 1)
		p := ps[0]
		require.Equal(t, changed, p.ProcessRecord, "every field replaced")
		requireNear(t, first.StartedAt, p.StartedAt, storeSlack, "started when first recorded")
		require.Greater(t, p.SeenAt.Sub(first.SeenAt), 10*time.Millisecond, "seen again")
		requireNear(t, p.SeenAt.Add(2*time.Hour), p.ExpiresAt, storeSlack)

		// A shorter TTL shortens the record's life: a beat sets it, it
		// does not only extend it.
		f.beat(changed, time.Minute)
		p = f.processes()[0]
		requireNear(t, p.SeenAt.Add(time.Minute), p.ExpiresAt, storeSlack)

		// Fewer queues, and none at all.
		changed.Queues = nil
		f.beat(changed, time.Minute)
		require.Empty(t, f.processes()[0].Queues)
	})

	t.Run("RenewalKeepsAlive", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		// Long enough that a loaded machine's stalls do not outlast three
		// beat intervals (at 200ms, one once did).
		const ttl = 600 * time.Millisecond
		p := newProcess("beating")
		f.beat(p, ttl)
		started := f.processes()[0].StartedAt
		// Beats every ttl/4 keep it listed well past its first TTL.
		for end := time.Now().Add(2 * ttl); time.Now().Before(end); {
			time.Sleep(ttl / 4)
			require.False(t, f.beat(p, ttl).Created, "renewed in time")
			ps := f.processes()
			require.Equal(t, []string{"beating"}, processIDs(ps))
			requireNear(t, started, ps[0].StartedAt, storeSlack)
		}
		// Then it stops beating, and is gone a TTL later.
		stopped := time.Now()
		f.eventually("the record expires", func() bool { return len(f.processes()) == 0 })
		require.Greater(t, time.Since(stopped), ttl/2, "not before its TTL")
	})

	t.Run("Expires", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		// 300ms, not less: on a loaded machine the list below came after
		// a TTL of 50ms had run out.
		f.beat(newProcess("short"), 300*time.Millisecond)
		f.beat(newProcess("long"), time.Hour)
		first := f.processes()
		require.Equal(t, []string{"long", "short"}, processIDs(first))
		f.eventually("the short record expires", func() bool { return len(f.processes()) == 1 })
		require.Equal(t, []string{"long"}, processIDs(f.processes()))

		// Beating again after it expired starts a new record.
		time.Sleep(10 * time.Millisecond)
		require.True(t, f.beat(newProcess("short"), time.Hour).Created, "an expired record is not renewed")
		ps := f.processes()
		require.Equal(t, []string{"long", "short"}, processIDs(ps))
		require.Greater(t, ps[1].StartedAt.Sub(first[1].StartedAt), 10*time.Millisecond, "started anew")
	})

	t.Run("ExpiredWhileNotListed", func(t *testing.T) {
		// A record expires by the backend's clock whether or not anything
		// lists it meanwhile; a beat of it then starts a new one.
		f := newJobFixture(t, newDriver)
		f.beat(newProcess("p"), 30*time.Millisecond)
		time.Sleep(60 * time.Millisecond)
		require.True(t, f.beat(newProcess("p"), time.Hour).Created)
	})

	t.Run("Remove", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.beat(newProcess("a"), time.Hour)
		f.beat(newProcess("b"), time.Hour)
		remove := func(id string) {
			t.Helper()
			require.NoError(t, f.d.ProcessRemove(f.ctx, &batondriver.ProcessRemoveParams{ID: id}))
		}
		remove("a")
		require.Equal(t, []string{"b"}, processIDs(f.processes()), "removed at once")
		remove("a") // again: no error
		remove("never-there")
		require.Equal(t, []string{"b"}, processIDs(f.processes()))
		require.True(t, f.beat(newProcess("a"), time.Hour).Created, "a removed record is not renewed")
		remove("a")
		remove("b")
		require.Empty(t, f.processes())

		// An expired record, not listed since, is removed without error.
		f.beat(newProcess("c"), time.Millisecond)
		time.Sleep(5 * time.Millisecond)
		remove("c")
		require.Empty(t, f.processes())
	})

	t.Run("ListMany", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		var want []*batondriver.Process
		for i := range 300 {
			p := withProcess(fmt.Sprintf("p%d-%d", rand.IntN(1000), i), func(p *batondriver.ProcessRecord) {
				p.Host, p.PID, p.Busy = fmt.Sprintf("host-%d", rand.IntN(5)), rand.IntN(3), i%50
			})
			f.beat(p, time.Hour)
			want = append(want, &batondriver.Process{ProcessRecord: p})
		}
		// 150 more that expire at once: the listing drops them all.
		for i := range 150 {
			f.beat(newProcess(fmt.Sprintf("gone%03d", i)), time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
		slices.SortFunc(want, func(a, b *batondriver.Process) int {
			return cmp.Or(strings.Compare(a.Host, b.Host), a.PID-b.PID, strings.Compare(a.ID, b.ID))
		})
		ps := f.processes()
		require.Equal(t, processIDs(want), processIDs(ps), "every live record, in order")
		for i, p := range ps {
			require.Equal(t, want[i].ProcessRecord, p.ProcessRecord)
		}
		require.Len(t, f.processes(), 300, "listed again")
	})

	t.Run("OddBytesAndLimits", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		odd := withProcess(`{x}|:é "\`+"\t\n", func(p *batondriver.ProcessRecord) {
			p.Name = `a "name" with {braces}|pipes` + "\n"
			p.Host = "h|ost{1}:é"
			p.Version = "v0.0.0-20260101000000-abcdef|"
		})
		longest := withProcess(strings.Repeat("i", batondriver.MaxProcessIDLen), func(p *batondriver.ProcessRecord) {
			p.Name = strings.Repeat("n", batondriver.MaxProcessNameLen)
			p.Host = strings.Repeat("h", batondriver.MaxProcessHostLen)
			p.Version = strings.Repeat("v", batondriver.MaxProcessVersionLen)
			p.Queues = make([]batondriver.ProcessQueue, batondriver.MaxProcessQueues)
			for i := range p.Queues {
				p.Queues[i] = batondriver.ProcessQueue{Name: fmt.Sprintf("%0128d", i), Weight: i, MaxWorkers: 1<<31 - 1 - i}
			}
			p.PID, p.Concurrency, p.Busy = 1<<31-1, 1<<31-1, 1<<31-1
		})
		f.beat(odd, time.Hour)
		f.beat(longest, time.Hour)
		ps := f.processes()
		require.Len(t, ps, 2)
		require.Equal(t, longest, ps[0].ProcessRecord, `"hhh…" before "h|ost…"`)
		require.Equal(t, odd, ps[1].ProcessRecord)
	})

	t.Run("BadParams", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		bad := map[string]batondriver.ProcessRecord{
			"no ID":            newProcess(""),
			"a long ID":        newProcess(strings.Repeat("i", batondriver.MaxProcessIDLen+1)),
			"an ID not UTF-8":  newProcess("p\xff"),
			"a long name":      withProcess("p", func(p *batondriver.ProcessRecord) { p.Name = strings.Repeat("n", batondriver.MaxProcessNameLen+1) }),
			"a name not UTF-8": withProcess("p", func(p *batondriver.ProcessRecord) { p.Name = "\xc3" }),
			"a long host":      withProcess("p", func(p *batondriver.ProcessRecord) { p.Host = strings.Repeat("h", batondriver.MaxProcessHostLen+1) }),
			"a host not UTF-8": withProcess("p", func(p *batondriver.ProcessRecord) { p.Host = "\xff" }),
			"a long version": withProcess("p", func(p *batondriver.ProcessRecord) {
				p.Version = strings.Repeat("v", batondriver.MaxProcessVersionLen+1)
			}),
			"a negative PID":         withProcess("p", func(p *batondriver.ProcessRecord) { p.PID = -1 }),
			"a negative concurrency": withProcess("p", func(p *batondriver.ProcessRecord) { p.Concurrency = -1 }),
			"a negative busy count":  withProcess("p", func(p *batondriver.ProcessRecord) { p.Busy = -1 }),
			"too many queues": withProcess("p", func(p *batondriver.ProcessRecord) {
				p.Queues = make([]batondriver.ProcessQueue, batondriver.MaxProcessQueues+1)
				for i := range p.Queues {
					p.Queues[i].Name = fmt.Sprint("q", i)
				}
			}),
			"a bad queue name":  withProcess("p", func(p *batondriver.ProcessRecord) { p.Queues[1].Name = "a queue" }),
			"an empty queue":    withProcess("p", func(p *batondriver.ProcessRecord) { p.Queues[2].Name = "" }),
			"a negative weight": withProcess("p", func(p *batondriver.ProcessRecord) { p.Queues[0].Weight = -1 }),
			"a negative cap":    withProcess("p", func(p *batondriver.ProcessRecord) { p.Queues[1].MaxWorkers = -1 }),
		}
		calls := map[string]func(ctx context.Context) error{}
		for name, p := range bad {
			calls["ProcessBeat: "+name] = func(ctx context.Context) error {
				_, err := f.d.ProcessBeat(ctx, &batondriver.ProcessBeatParams{ProcessRecord: p, TTL: time.Hour})
				return err
			}
		}
		for name, ttl := range map[string]time.Duration{"no TTL": 0, "a TTL under 1ms": time.Millisecond - 1, "a negative TTL": -time.Hour} {
			calls["ProcessBeat: "+name] = func(ctx context.Context) error {
				_, err := f.d.ProcessBeat(ctx, &batondriver.ProcessBeatParams{ProcessRecord: newProcess("p"), TTL: ttl})
				return err
			}
		}
		for name, id := range map[string]string{"no ID": "", "a long ID": strings.Repeat("i", batondriver.MaxProcessIDLen+1), "an ID not UTF-8": "\xff"} {
			calls["ProcessRemove: "+name] = func(ctx context.Context) error {
				return f.d.ProcessRemove(ctx, &batondriver.ProcessRemoveParams{ID: id})
			}
		}
		requireBadParamsFirst(t, f.ctx, calls)
		require.Empty(t, f.processes(), "a refused beat recorded a process")

		// The errors say what is wrong.
		_, err := f.d.ProcessBeat(f.ctx, &batondriver.ProcessBeatParams{ProcessRecord: bad["a negative weight"], TTL: time.Hour})
		require.ErrorContains(t, err, "weight")
		_, err = f.d.ProcessBeat(f.ctx, &batondriver.ProcessBeatParams{ProcessRecord: bad["a negative cap"], TTL: time.Hour})
		require.ErrorContains(t, err, "MaxWorkers")
		_, err = f.d.ProcessBeat(f.ctx, &batondriver.ProcessBeatParams{ProcessRecord: bad["a bad queue name"], TTL: time.Hour})
		require.ErrorContains(t, err, `queue name "a queue"`)
		_, err = f.d.ProcessBeat(f.ctx, &batondriver.ProcessBeatParams{ProcessRecord: newProcess("p")})
		require.ErrorContains(t, err, "TTL")
	})

	t.Run("EndedContext", func(t *testing.T) {
		f := newJobFixture(t, newDriver)
		f.beat(newProcess("kept"), time.Hour)
		ended, cancel := context.WithCancel(f.ctx)
		cancel()
		_, err := f.d.ProcessBeat(ended, &batondriver.ProcessBeatParams{ProcessRecord: newProcess("new"), TTL: time.Hour})
		require.ErrorIs(t, err, context.Canceled)
		err = f.d.ProcessRemove(ended, &batondriver.ProcessRemoveParams{ID: "kept"})
		require.ErrorIs(t, err, context.Canceled)
		_, err = f.d.ProcessList(ended)
		require.ErrorIs(t, err, context.Canceled)
		require.Equal(t, []string{"kept"}, processIDs(f.processes()), "nothing recorded or removed")
	})

	t.Run("ApartFromQueues", func(t *testing.T) {
		// The registry belongs to no queue: it makes none listed, and a
		// queue's transitions leave it alone.
		f := newJobFixture(t, newDriver)
		f.beat(withProcess("p", func(p *batondriver.ProcessRecord) {
			p.Queues = []batondriver.ProcessQueue{{Name: f.queue, Weight: 1}}
		}), time.Hour)
		qs, err := f.d.QueueList(f.ctx)
		require.NoError(t, err)
		require.NotContains(t, qs, f.queue, "a beat makes no queue")
		f.insert(newJob())
		f.pause(false)
		require.Len(t, f.processes(), 1)
	})
}

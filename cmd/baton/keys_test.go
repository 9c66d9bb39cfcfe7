package main

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// The per-key commands, run by TestCLI.

// acme is a plain key; odd is one with spaces, a colon and braces, which
// must stay one argument and one table cell.
const (
	hooks = "hooks"
	acme  = "customer:acme"
	odd   = "acme corp:{eu} 42"
)

// keyedFixture is a namespace whose queue "hooks" holds key acme (limit 2)
// with four jobs — the first running, the second available, two parked —
// and key odd (limit 1) with two — one available, one parked.
type keyedFixture struct {
	*fixture
	acme, odd []string // job IDs, in insert order
}

func keyed(t *testing.T, bin string) *keyedFixture {
	t.Helper()
	f := &keyedFixture{fixture: setup(t, bin)}
	f.acme = f.insertKeyed(acme, 2, "", "a1@x", "a2@x", "a3@x", "a4@x")
	f.odd = f.insertKeyed(odd, 1, "", "o1@x", "o2@x")
	fetched, err := f.driver.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: hooks, Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 1)
	require.Equal(t, f.acme[0], fetched.Jobs[0].ID)
	return f
}

// insertKeyed inserts into "hooks" one job per address with concurrency
// key key, the default limit limit and policy onBusy, and returns their
// IDs.
func (f *fixture) insertKeyed(key string, limit int, onBusy baton.OnBusy, tos ...string) []string {
	f.t.Helper()
	var ids []string
	for _, to := range tos {
		res, err := f.client.Insert(context.Background(), email{To: to}, &baton.InsertOpts{Queue: hooks,
			Concurrency: &baton.ConcurrencyOpts{Key: baton.KeyOf(func(email) string { return key }), Limit: limit, OnBusy: onBusy}})
		require.NoError(f.t, err)
		ids = append(ids, res.Job.ID)
	}
	return ids
}

// showKey runs `key show --json`.
func (f *fixture) showKey(key string) keyShowOut {
	f.t.Helper()
	var out keyShowOut
	f.runJSON(&out, "key", "show", hooks, key)
	return out
}

// showJob runs `jobs show --json`.
func (f *fixture) showJob(id string) jobOut {
	f.t.Helper()
	var out jobOut
	f.runJSON(&out, "jobs", "show", id)
	return out
}

// tableRow returns the line of table that ends with cell, split on runs
// of two spaces or more (the columns; a cell may hold one space).
func tableRow(t *testing.T, table, cell string) []string {
	t.Helper()
	for line := range strings.SplitSeq(table, "\n") {
		if strings.HasSuffix(line, "  "+cell) {
			return regexp.MustCompile(`\s{2,}`).Split(line, -1)
		}
	}
	t.Fatalf("no row ends with %q in\n%s", cell, table)
	return nil
}

func testKeys(t *testing.T, bin string) {
	f := keyed(t, bin)

	var page keyListOut
	f.runJSON(&page, "keys", "list", hooks)
	require.Equal(t, hooks, page.Queue)
	require.Equal(t, 2, page.Total)
	require.Len(t, page.Keys, 2)
	a, o := page.Keys[0], page.Keys[1]
	require.Equal(t, acme, a.Key, "most parked first")
	require.Equal(t, odd, o.Key)
	require.NotNil(t, a.OldestParked)
	require.Positive(t, a.LastFence, "a job of acme was fetched")
	a.OldestParked, a.LastFence = nil, 0
	two := 2
	require.Equal(t, keyOut{Queue: hooks, Key: acme, Limit: &two, Holding: 2, Running: 1, Parked: 2}, *a)
	require.Equal(t, 1, o.Holding)
	require.Zero(t, o.Running)
	require.Equal(t, 1, o.Parked)
	require.Zero(t, o.LastFence, "no job of odd was fetched")

	r := f.run("keys", "list", hooks)
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 4, r.stdout)
	require.Equal(t, []string{"HOLDERS", "RUNNING", "CHAINED", "PARKED", "OLDEST WAIT", "LIMIT", "LAST FENCE", "KEY"},
		regexp.MustCompile(`\s{2,}`).Split(lines[0], -1))
	row := tableRow(t, r.stdout, acme)
	require.Equal(t, []string{"2", "1", "0", "2"}, row[:4])
	require.Regexp(t, `^\d+(ms|s)$`, row[4], "oldest wait")
	require.Equal(t, "2", row[5])
	require.Regexp(t, `^\d{10,}$`, row[6], "last fence")
	row = tableRow(t, r.stdout, odd)
	require.Equal(t, []string{"1", "0", "0", "1"}, row[:4])
	require.Equal(t, []string{"1", "-", odd}, row[5:])
	require.Equal(t, "(2 active keys)", lines[3])

	// A page at a time.
	f.runJSON(&page, "keys", "list", hooks, "--limit", "1", "--offset", "1")
	require.Equal(t, 2, page.Total)
	require.Equal(t, 1, page.Offset)
	require.Len(t, page.Keys, 1)
	require.Equal(t, odd, page.Keys[0].Key)
	r = f.run("keys", "list", hooks, "--limit", "1")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "(1-1 of 2 active keys; --offset 1 for more)")
	require.NotContains(t, r.stdout, odd)

	// key show: the same, with the holders.
	k := f.showKey(acme)
	require.Equal(t, acme, k.Key)
	require.Equal(t, 2, k.Holding)
	require.Len(t, k.Holders, 2)
	holders := map[string]keyHolderOut{}
	for _, h := range k.Holders {
		holders[h.ID] = h
	}
	run, avail := holders[f.acme[0]], holders[f.acme[1]]
	require.Equal(t, baton.JobStateRunning, run.State)
	require.Equal(t, k.LastFence, run.Fence)
	require.NotNil(t, run.LeaseUntil)
	require.NotNil(t, run.TTLMillis)
	require.InDelta(t, time.Minute.Milliseconds(), *run.TTLMillis, float64(20*time.Second.Milliseconds()))
	require.Equal(t, keyHolderOut{ID: f.acme[1], State: baton.JobStateAvailable}, avail, "not started: no fence, no lease")

	r = f.run("key", "show", hooks, acme)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Key:\s+customer:acme\n`, r.stdout)
	require.Regexp(t, `Limit:\s+2\n`, r.stdout)
	require.Regexp(t, `Parked:\s+2 \(the next has waited \d+m?s\)`, r.stdout)
	require.Regexp(t, `Holders:\s+2 \(1 running\)`, r.stdout)
	require.Regexp(t, `Chained:\s+0\n`, r.stdout)
	require.Regexp(t, `JOB\s+STATE\s+FENCE\s+LEASE\s+NEXT`, r.stdout)
	require.Regexp(t, f.acme[0]+`\s+running\s+\d+\s+\d+s left\s+-\n`, r.stdout)
	require.Regexp(t, f.acme[1]+`\s+available\s+-\s+-\s+-\n`, r.stdout)

	// The odd key is one argument and shows as it is.
	r = f.run("key", "show", hooks, odd)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Key:\s+acme corp:\{eu\} 42\n`, r.stdout)
	require.Regexp(t, f.odd[0]+`\s+available`, r.stdout)
	require.Equal(t, odd, f.showKey(odd).Key)

	// jobs list --key: a key's parked jobs alone, next to run first.
	var list jobListOut
	f.runJSON(&list, "jobs", "list", "-q", hooks, "--key", acme)
	require.Equal(t, 2, list.Total)
	require.Equal(t, f.acme[2:], jobOutIDs(list.Jobs))
	f.runJSON(&list, "jobs", "list", "-q", hooks, "--key", acme, "--state", "parked", "--limit", "1", "--offset", "1")
	require.Equal(t, 2, list.Total)
	require.Equal(t, f.acme[3:], jobOutIDs(list.Jobs))
	r = f.run("jobs", "list", "-q", hooks, "--key", odd)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, f.odd[1])
	require.NotContains(t, r.stdout, f.acme[2])
	f.runJSON(&list, "jobs", "list", "-q", hooks, "--key", "customer:nobody")
	require.Zero(t, list.Total)
	require.Empty(t, list.Jobs)

	// A fetch with chained leases takes acme's and odd's available jobs
	// and, with nothing left available, chains each key's next parked job
	// behind them: running, holding no slot, no longer parked.
	fetched, err := f.driver.JobFetch(context.Background(), &batondriver.JobFetchParams{Queue: hooks, Max: 2, LeaseTTL: time.Minute, Chain: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{f.acme[1], f.odd[0], f.acme[2], f.odd[1]}, idsOf(fetched.Jobs))
	f.runJSON(&page, "keys", "list", hooks)
	require.Equal(t, []int{2, 2, 1, 1}, []int{page.Keys[0].Holding, page.Keys[0].Running, page.Keys[0].Chained, page.Keys[0].Parked}, "acme")
	require.Equal(t, []int{1, 1, 1, 0}, []int{page.Keys[1].Holding, page.Keys[1].Running, page.Keys[1].Chained, page.Keys[1].Parked}, "odd")
	r = f.run("keys", "list", hooks)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, []string{"2", "2", "1", "1"}, tableRow(t, r.stdout, acme)[:4])
	require.Equal(t, []string{"1", "1", "1", "0"}, tableRow(t, r.stdout, odd)[:4])
	k = f.showKey(acme)
	require.Equal(t, 1, k.Chained)
	holders = map[string]keyHolderOut{}
	for _, h := range k.Holders {
		holders[h.ID] = h
	}
	require.Empty(t, holders[f.acme[0]].Next)
	require.Equal(t, f.acme[2], holders[f.acme[1]].Next)
	r = f.run("key", "show", hooks, acme)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Holders:\s+2 \(2 running\)\n`, r.stdout)
	require.Regexp(t, `Chained:\s+1 \(running behind a holder, without a slot until it returns\)\n`, r.stdout)
	require.Regexp(t, f.acme[1]+`\s+running\s+\d+\s+\d+s left\s+`+f.acme[2]+`\n`, r.stdout)
	require.Regexp(t, f.acme[0]+`\s+running\s+\d+\s+\d+s left\s+-\n`, r.stdout)
}

// jobOutIDs returns the IDs of the listed jobs, in order.
func jobOutIDs(jobs []*jobOut) []string {
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	return ids
}

// idsOf returns the IDs of rows, in order.
func idsOf(rows []*batondriver.JobRow) []string {
	var ids []string
	for _, r := range rows {
		ids = append(ids, r.ID)
	}
	return ids
}

func testKeyLimits(t *testing.T, bin string) {
	f := keyed(t, bin)

	// Halt acme: the running job goes on, the available one goes back to
	// wait.
	r := f.run("limit", "set", hooks, acme, "0")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `key "customer:acme" in queue hooks halted`)
	require.Contains(t, r.stdout, "1 running job will finish")
	require.Regexp(t, `Limit:\s+halted\n`, r.stdout)
	k := f.showKey(acme)
	require.True(t, k.Halted)
	require.True(t, k.Override)
	require.Equal(t, 0, *k.Limit)
	require.Equal(t, 1, k.Holding)
	require.Equal(t, 1, k.Running)
	require.Equal(t, 3, k.Parked)

	var parked jobListOut
	f.runJSON(&parked, "jobs", "list", "-q", hooks, "--state", "parked")
	require.Equal(t, 4, parked.Total, "three of acme, one of odd")
	var ids []string
	for _, j := range parked.Jobs {
		require.Equal(t, baton.JobStateParked, j.State)
		require.NotNil(t, j.ParkedAt)
		ids = append(ids, j.ID)
	}
	require.ElementsMatch(t, []string{f.acme[1], f.acme[2], f.acme[3], f.odd[1]}, ids)
	r = f.run("jobs", "list", "-q", hooks, "--state", "parked")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, f.acme[2]+`\s+email\s+parked`, r.stdout)
	r = f.run("keys", "list", hooks)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, []string{"1", "1", "0", "3"}, tableRow(t, r.stdout, acme)[:4])
	require.Equal(t, "halted", tableRow(t, r.stdout, acme)[5])

	// Reset: the jobs' default, 2, applies again and promotes one.
	r = f.run("limit", "reset", hooks, acme)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, `limit override of key "customer:acme" in queue hooks removed: the limit is its jobs' default, 2`)
	k = f.showKey(acme)
	require.False(t, k.Override)
	require.False(t, k.Halted)
	require.Equal(t, 2, *k.Limit)
	require.Equal(t, 2, k.Holding)
	require.Equal(t, 2, k.Parked)
	r = f.run("limit", "reset", hooks, acme)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "has no limit override: nothing to reset")

	// Raise odd's limit: its parked job is promoted at once.
	var out keyShowOut
	f.runJSON(&out, "limit", "set", hooks, odd, "3")
	require.Equal(t, odd, out.Key)
	require.Equal(t, 3, *out.Limit)
	require.True(t, out.Override)
	require.Equal(t, 2, out.Holding)
	require.Zero(t, out.Parked)
	require.Len(t, out.Holders, 2)
	r = f.run("keys", "list", hooks)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "3 (override)", tableRow(t, r.stdout, odd)[5])
	info, err := f.client.KeyGet(context.Background(), hooks, odd)
	require.NoError(t, err)
	require.Equal(t, 3, info.Limit, "the library sees it too")

	// A key never used needs --new-key; then it is listed, halted.
	r = f.run("limit", "set", hooks, "customer:new", "0")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, `concurrency key "customer:new" not found in queue "hooks"`)
	require.Contains(t, r.stderr, "--new-key")
	r = f.run("limit", "set", hooks, "customer:new", "0", "--new-key")
	require.Equal(t, exitOK, r.code, r.stderr)
	var page keyListOut
	f.runJSON(&page, "keys", "list", hooks)
	require.Equal(t, 3, page.Total)
	i := slices.IndexFunc(page.Keys, func(k *keyOut) bool { return k.Key == "customer:new" })
	require.GreaterOrEqual(t, i, 0, "listed")
	require.True(t, page.Keys[i].Halted)
	require.Zero(t, page.Keys[i].Holding)
}

func testKeyBadInput(t *testing.T, bin string) {
	f := keyed(t, bin)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"limit", "set", hooks, acme, "abc"}, `bad limit "abc": want a whole number from 0 (0 halts the key) to 2147483647`},
		{[]string{"limit", "set", hooks, acme, "1.5"}, `bad limit "1.5"`},
		{[]string{"limit", "set", hooks, acme, ""}, `bad limit ""`},
		{[]string{"limit", "set", hooks, acme, "-1"}, `bad limit "-1": want a whole number from 0`},
		{[]string{"limit", "set", hooks, acme, "--", "-1"}, `bad limit "-1"`},
		{[]string{"limit", "set", hooks, acme, "99999999999"}, `bad limit "99999999999"`},
		{[]string{"limit", "set", hooks, acme}, "missing argument"},
		{[]string{"limit", "set", hooks, acme, "1", "2"}, `unexpected argument "2"`},
		{[]string{"limit", "reset", hooks}, "missing argument"},
		{[]string{"limit"}, `"baton limit" needs a subcommand`},
		{[]string{"key", "show", hooks}, "missing argument"},
		{[]string{"key", "show", hooks, "customer:acme", "x"}, `unexpected argument "x"`},
		{[]string{"key", "show", hooks, ""}, "bad KEY: it must have 1 to 512 bytes, not 0"},
		{[]string{"key", "show", hooks, strings.Repeat("k", 513)}, "not 513"},
		{[]string{"key", "show", hooks, "-x"}, "(a KEY that starts with '-' goes after '--')"},
		{[]string{"jobs", "list", "--key", acme}, "--key needs -q QUEUE"},
		{[]string{"jobs", "list", "-q", hooks, "--key", acme, "--state", "running"}, "--key lists parked jobs only, not --state running"},
		{[]string{"jobs", "list", "-q", hooks, "--key", strings.Repeat("k", 513)}, "bad --key: it must have 1 to 512 bytes, not 513"},
		{[]string{"keys", "list"}, "missing argument"},
		{[]string{"keys", "list", hooks, "--limit", "0"}, "out of range 1..1000"},
		// An empty QUEUE is no queue: bad usage, not "every queue".
		{[]string{"keys", "list", ""}, "empty QUEUE"},
		{[]string{"key", "show", "", acme}, "empty QUEUE"},
		{[]string{"limit", "set", "", acme, "1"}, "empty QUEUE"},
		{[]string{"limit", "set", "", acme, "1", "--new-key"}, "empty QUEUE"},
		{[]string{"limit", "reset", "", acme}, "empty QUEUE"},
		{[]string{"queue", "pause", ""}, "empty QUEUE"},
		{[]string{"queue", "resume", ""}, "empty QUEUE"},
	} {
		r := f.run(tc.args...)
		require.Equal(t, exitUsage, r.code, "%q: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
		require.Empty(t, r.stdout, tc.args)
	}
	// A bad number is bad usage before anything connects.
	r := cli(t, bin, nil, "--redis", "redis://127.0.0.1:1", "limit", "set", hooks, acme, "x", "--json")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.JSONEq(t, `{"error": "bad limit \"x\": want a whole number from 0 (0 halts the key) to 2147483647", "exit_code": 2}`, r.stderr)

	for _, args := range [][]string{
		{"key", "show", hooks, "customer:nobody"},
		{"limit", "reset", hooks, "customer:nobody"},
		{"limit", "set", hooks, "customer:nobody", "1"},
	} {
		r := f.run(args...)
		require.Equal(t, exitNotFound, r.code, "%q: %s", args, r.stderr)
		require.Contains(t, r.stderr, `concurrency key "customer:nobody" not found in queue "hooks": it has no jobs and no limit override there`)
	}
	r = f.run("key", "show", hooks, "--", "-x")
	require.Equal(t, exitNotFound, r.code, "after --, -x is a key: %s", r.stderr)
	require.Contains(t, r.stderr, `concurrency key "-x" not found`)
	r = f.run("key", "show", "mail", acme, "--json")
	require.Equal(t, exitNotFound, r.code)
	require.JSONEq(t, `{"error": "queue \"mail\" not found (known queues: hooks)", "exit_code": 3}`, r.stderr)
	for _, args := range [][]string{
		{"keys", "list", "mail"},
		{"limit", "set", "mail", acme, "1", "--new-key"},
		{"limit", "reset", "mail", acme},
	} {
		r := f.run(args...)
		require.Equal(t, exitNotFound, r.code, "%q: %s", args, r.stderr)
		require.Contains(t, r.stderr, `queue "mail" not found`)
	}
	r = f.run("key", "show", hooks, odd+"x")
	require.Equal(t, exitNotFound, r.code, "a key is matched whole")

	// Unreachable: exit 4, as for every command.
	r = cli(t, bin, nil, "--redis", "redis://127.0.0.1:1", "keys", "list", hooks)
	require.Equal(t, exitUnreachable, r.code, r.stderr)
}

func testParkedDropped(t *testing.T, bin string) {
	f := setup(t, bin)
	ctx := context.Background()
	// sync:u1, limit 1: the first job holds the slot; a second with Drop is
	// dropped, a third with Wait is parked.
	first := f.insertKeyed("sync:u1", 1, "", "u1@x")[0]
	dropped := f.insertKeyed("sync:u1", 1, baton.OnBusyDrop, "u1@x")[0]
	parked := f.insertKeyed("sync:u1", 1, baton.OnBusyWait, "u1@x")[0]
	res, err := f.client.Insert(ctx, email{To: "uniq@x"}, &baton.InsertOpts{Queue: hooks,
		Unique: &baton.UniqueOpts{Key: baton.KeyOf(func(e email) string { return "to:" + e.To }), Scope: baton.UniqueQueued}})
	require.NoError(t, err)
	unique := res.Job.ID

	var s statsOut
	f.runJSON(&s, "stats")
	require.NotNil(t, s.OldestAvailable)
	s.OldestAvailable = nil
	require.Equal(t, statsOut{Queues: 1, Available: 2, Parked: 1, Dropped: 1, DroppedEver: 1, Keys: 1, RetryingExact: true}, s)
	r := f.run("stats")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Parked:\s+1\n`, r.stdout)
	require.Regexp(t, `Dropped:\s+1 \(ever: 1\)\n`, r.stdout)
	require.Regexp(t, `Active keys:\s+1\n`, r.stdout)

	var qs struct{ Queues []queueOut }
	f.runJSON(&qs, "queues")
	require.Len(t, qs.Queues, 1)
	q := qs.Queues[0]
	require.Equal(t, 1, q.Parked)
	require.Equal(t, 1, q.Dropped)
	require.Equal(t, int64(1), q.DroppedEver)
	require.Equal(t, 1, q.Keys)
	r = f.run("queues")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Equal(t, []string{"hooks", "active", "2", "0", "0", "0", "1", "0", "0", "0", "1", "(1)", "1"}, strings.Fields(lines[1])[:13])

	// The states are listed, and a job shows its key settings.
	var page jobListOut
	f.runJSON(&page, "jobs", "list", "--state", "dropped")
	require.Equal(t, 1, page.Total)
	require.Equal(t, dropped, page.Jobs[0].ID)
	require.NotEmpty(t, page.Jobs[0].Errors, "the reason is recorded")
	j := f.showJob(parked)
	require.Equal(t, baton.JobStateParked, j.State)
	require.Equal(t, "sync:u1", j.Key)
	require.Equal(t, 1, j.Limit)
	require.Equal(t, baton.OnBusyWait, j.OnBusy)
	require.NotNil(t, j.ParkedAt)
	r = f.run("jobs", "show", parked)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `State:\s+parked\n`, r.stdout)
	require.Regexp(t, `Key:\s+sync:u1\n`, r.stdout)
	require.Regexp(t, `Key limit:\s+1 \(the default it carries`, r.stdout)
	require.Regexp(t, `On busy:\s+wait\n`, r.stdout)
	require.Regexp(t, `Parked at:\s+\d{4}-`, r.stdout)
	require.NotContains(t, r.stdout, "Fence:", "never leased")
	r = f.run("jobs", "show", unique)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Unique:\s+to:uniq@x \(scope queued\)`, r.stdout)
	require.NotContains(t, r.stdout, "Key:", "no concurrency key")
	j = f.showJob(unique)
	require.Equal(t, "to:uniq@x", j.Unique)
	require.Equal(t, baton.UniqueQueued, j.UniqueScope)
	require.Empty(t, j.Key)
	require.Nil(t, j.ParkedAt)

	// Run the holder and ask for another run: its fence and runs show.
	fetched, err := f.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: hooks, Max: 2, LeaseTTL: time.Minute})
	require.NoError(t, err)
	var holder *batondriver.JobRow
	for _, fj := range fetched.Jobs {
		if fj.ID == first {
			holder = fj
		}
	}
	require.NotNil(t, holder)
	_, err = f.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: hooks, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: first, Lease: holder.Lease}, Outcome: batondriver.JobOutcomeAgain},
	}})
	require.NoError(t, err)
	j = f.showJob(first)
	require.Equal(t, 1, j.Runs)
	require.Equal(t, holder.Fence, j.Fence)
	r = f.run("jobs", "show", first)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Runs:\s+1 `, r.stdout)
	require.Regexp(t, `Fence:\s+\d+\n`, r.stdout)

	// A parked job cannot be retried; a dropped one can, and waits its turn.
	j = f.showJob(parked)
	require.Equal(t, baton.JobStateAvailable, j.State, "promoted when the holder's run ended")
	j = f.showJob(first)
	require.Equal(t, baton.JobStateParked, j.State, "its next run waits behind the promoted job")
	r = f.run("jobs", "retry", first)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "is parked: only scheduled, available, cancelled, dead and dropped jobs can be retried")
	r = f.run("jobs", "retry", dropped)
	require.Equal(t, exitOK, r.code, r.stderr)
	j = f.showJob(dropped)
	require.Equal(t, baton.JobStateParked, j.State)
	r = f.run("jobs", "delete", dropped)
	require.Equal(t, exitOK, r.code, "a parked job can be deleted: %s", r.stderr)
	require.Equal(t, 1, f.showKey("sync:u1").Parked)
}

// `jobs list --state` takes every state, and names them in order.
func TestParseState(t *testing.T) {
	t.Parallel()
	for _, st := range baton.JobStates {
		got, err := parseState(string(st))
		require.NoError(t, err)
		require.Equal(t, st, got)
	}
	require.Equal(t, "scheduled, parked, available, running, completed, cancelled, dead, dropped", statesList())
}

func TestKeyText(t *testing.T) {
	t.Parallel()
	for k, want := range map[string]string{
		"customer:acme":     "customer:acme",
		"acme corp:{eu} 42": "acme corp:{eu} 42",
		"ünïcode ✓":         "ünïcode ✓",
		"tab\there":         `"tab\there"`,
		"line\nbreak":       `"line\nbreak"`,
		"\xff\xfe":          `"\xff\xfe"`,
	} {
		require.Equal(t, want, keyText(k), "%q", k)
	}
	out := toKeyOut(&baton.KeyInfo{Key: "\xff", Limit: -1})
	require.Equal(t, "/w==", out.KeyBase64, "JSON cannot carry invalid UTF-8")
	require.Nil(t, out.Limit, "no limit known: null")
	b, err := json.Marshal(out)
	require.NoError(t, err)
	require.Contains(t, string(b), `"limit":null`)
}

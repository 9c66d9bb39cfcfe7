package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/redistest"
)

// The tests here build the real binary once and run it against private
// redis-server processes (the harness's shared standalone server and
// Cluster); each test works under a key prefix of its own.

// TestCLI builds the binary and runs the subtests, in parallel, with it.
func TestCLI(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "baton")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for name, test := range map[string]func(*testing.T, string){
		"Queues":         testQueues,
		"Stats":          testStats,
		"JobsList":       testJobsList,
		"JobsShow":       testJobsShow,
		"JobsRetry":      testJobsRetryDelete,
		"JobsCancel":     testJobsCancel,
		"PauseResume":    testPauseResume,
		"Dead":           testDead,
		"Locks":          testLocks,
		"LocksList":      testLocksList,
		"Keys":           testKeys,
		"KeyLimits":      testKeyLimits,
		"KeyBadInput":    testKeyBadInput,
		"ParkedDropped":  testParkedDropped,
		"Environment":    testEnvironment,
		"Functions":      testFunctions,
		"BadInput":       testBadInput,
		"Unreachable":    testUnreachable,
		"Schedules":      testSchedules,
		"Processes":      testProcesses,
		"Cluster":        testCluster,
		"TLS":            testTLS,
		"Demo":           testDemo,
		"Dash":           testDash,
		"DashJSON":       testDashJSON,
		"EmptyBackend":   testEmptyBackend,
		"JSONErrorShape": testJSONError,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, bin)
		})
	}
	for name, test := range platformTests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, bin)
		})
	}
}

// platformTests are the subtests of TestCLI that need one OS, registered by
// their files.
var platformTests = map[string]func(*testing.T, string){}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the binary with args and env (on top of a clean environment:
// BATON_* unset, so that nothing falls back to a Redis of the machine).
func cli(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BATON_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running baton %v: %v", args, err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	require.NotContains(t, r.stderr, "goroutine ", "a stack trace")
	require.NotContains(t, r.stderr, "panic")
	return r
}

// fixture is a seeded namespace on a Redis, and how to point baton at it.
type fixture struct {
	t      *testing.T
	bin    string
	redis  string // the --redis value
	prefix string
	driver *batonredis.Driver
	client *baton.Client

	// The jobs seeded in queue "mail", by state, and the one in "default".
	dead, retrying, running, available, delayed, other string
}

// run runs baton on the fixture's Redis and prefix.
func (f *fixture) run(args ...string) result {
	f.t.Helper()
	return cli(f.t, f.bin, nil, append([]string{"--redis", f.redis, "--prefix", f.prefix}, args...)...)
}

// runJSON runs baton with --json, requires exit code 0 and decodes stdout.
func (f *fixture) runJSON(v any, args ...string) {
	f.t.Helper()
	r := f.run(append(args, "--json")...)
	require.Equal(f.t, exitOK, r.code, "stderr: %s", r.stderr)
	require.NoError(f.t, json.Unmarshal([]byte(r.stdout), v), "stdout: %s", r.stdout)
}

type email struct {
	To string `json:"to"`
}

func (email) Kind() string { return "email" }

// setup returns an empty namespace on the shared standalone server.
func setup(t *testing.T, bin string) *fixture {
	t.Helper()
	addr := redistest.SharedServer(t).Addr()
	return newFixture(t, bin, "redis://"+addr, addr)
}

func newFixture(t *testing.T, bin, redisFlag string, addrs ...string) *fixture {
	t.Helper()
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "t" + hex.EncodeToString(b)
	d, err := batonredis.New(rc, &batonredis.Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	// AllowUnknownKinds: the tests insert kinds no worker of theirs runs.
	c, err := baton.NewClient(d, &baton.Config{AllowUnknownKinds: true})
	require.NoError(t, err)
	return &fixture{t: t, bin: bin, redis: redisFlag, prefix: prefix, driver: d, client: c}
}

// seeded returns a namespace holding, in queue "mail", one job in each
// state that matters (dead, retrying, running, available, delayed), and
// one available job in queue "default".
func seeded(t *testing.T, bin string) *fixture {
	t.Helper()
	return seed(setup(t, bin))
}

func seed(f *fixture) *fixture {
	t := f.t
	ctx := context.Background()
	insert := func(to string, opts *baton.InsertOpts) string {
		res, err := f.client.Insert(ctx, email{To: to}, opts)
		require.NoError(t, err)
		return res.Job.ID
	}
	for i, to := range []string{"a@x", "b@x", "c@x", "d@x"} {
		id := insert(to, &baton.InsertOpts{Queue: "mail", MaxAttempts: 3, Priority: 1})
		if i == 3 {
			f.available = id
		}
	}
	f.delayed = insert("later@x", &baton.InsertOpts{Queue: "mail", Priority: 1, Delay: time.Hour})
	f.other = insert("other@x", nil)

	// Play a worker through the driver: one attempt dies, one fails and
	// waits for its retry, one goes on running.
	fetched, err := f.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "mail", Max: 3, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 3)
	j := fetched.Jobs
	f.dead, f.retrying, f.running = j[0].ID, j[1].ID, j[2].ID
	res, err := f.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: "mail", Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: j[0].ID, Lease: j[0].Lease}, Outcome: batondriver.JobOutcomeDead, Error: "smtp: 550 no such user"},
		{JobLease: batondriver.JobLease{ID: j[1].ID, Lease: j[1].Lease}, Outcome: batondriver.JobOutcomeRetry, Error: "smtp: timeout", RunAt: time.Now().Add(30 * time.Minute)},
	}})
	require.NoError(t, err)
	require.Empty(t, res.Stale)
	return f
}

func testQueues(t *testing.T, bin string) {
	f := seeded(t, bin)
	r := f.run("queues")
	require.Equal(t, exitOK, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 3)
	require.Equal(t, []string{"QUEUE", "STATUS", "AVAILABLE", "RUNNING", "SCHEDULED", "RETRYING", "PARKED",
		"DEAD", "CANCELLED", "COMPLETED", "DROPPED", "(EVER)", "KEYS", "OLDEST"}, strings.Fields(lines[0]))
	require.Equal(t, []string{"default", "active", "1", "0", "0", "0", "0", "0", "0", "0", "0", "(0)", "0"}, strings.Fields(lines[1])[:13])
	require.Equal(t, []string{"mail", "active", "1", "1", "2", "1", "0", "1", "0", "0", "0", "(0)", "0"}, strings.Fields(lines[2])[:13])

	var out struct{ Queues []queueOut }
	f.runJSON(&out, "queues")
	require.Len(t, out.Queues, 2)
	mail := out.Queues[1]
	require.NotNil(t, mail.OldestAvailable)
	mail.OldestAvailable = nil
	require.Equal(t, queueOut{Queue: "mail", Available: 1, Running: 1, Scheduled: 2, Retrying: 1, RetryingExact: true, Dead: 1}, mail)
}

func testStats(t *testing.T, bin string) {
	f := seeded(t, bin)
	var s statsOut
	f.runJSON(&s, "stats")
	require.NotNil(t, s.OldestAvailable)
	s.OldestAvailable = nil
	require.Equal(t, statsOut{Queues: 2, Available: 2, Running: 1, Scheduled: 2, Retrying: 1, RetryingExact: true, Dead: 1}, s)

	r := f.run("stats")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Queues:\s+2 \(0 paused\)`, r.stdout)
	require.Regexp(t, `Scheduled:\s+2 \(retrying: 1\)`, r.stdout)
}

func testJobsList(t *testing.T, bin string) {
	f := seeded(t, bin)
	var page jobListOut
	f.runJSON(&page, "jobs", "list", "-q", "mail", "--state", "scheduled")
	require.Equal(t, 2, page.Total)
	require.Len(t, page.Jobs, 2)
	require.Equal(t, f.retrying, page.Jobs[0].ID, "by RunAt: the retry is due before the delayed job")
	require.Equal(t, f.delayed, page.Jobs[1].ID)
	require.Equal(t, "smtp: timeout", page.Jobs[0].Errors[0].Error)

	// Every queue by default, merged, a page at a time.
	f.runJSON(&page, "jobs", "list", "--limit", "1")
	require.Equal(t, 2, page.Total)
	require.Len(t, page.Jobs, 1)
	f.runJSON(&page, "jobs", "list", "--limit", "1", "--offset", "1")
	require.Len(t, page.Jobs, 1)
	require.Equal(t, 1, page.Offset)

	r := f.run("jobs", "list", "--state", "running")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "QUEUE")
	require.Contains(t, r.stdout, f.running)
	require.Contains(t, r.stdout, `{"to":"c@x"}`)

	r = f.run("jobs", "list", "-q", "mail", "--state", "dead")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NotContains(t, r.stdout, "QUEUE", "one queue: no queue column")
	require.Contains(t, r.stdout, "smtp: 550 no such user")

	r = f.run("jobs", "list", "-q", "nosuch")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, `queue "nosuch" not found (known queues: default, mail)`)
}

func testJobsShow(t *testing.T, bin string) {
	f := seeded(t, bin)
	r := f.run("jobs", "show", f.dead)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `State:\s+dead`, r.stdout)
	require.Regexp(t, `Queue:\s+mail`, r.stdout)
	require.Regexp(t, `Attempt:\s+1 of 3`, r.stdout)
	require.Contains(t, r.stdout, "smtp: 550 no such user")

	var j jobOut
	f.runJSON(&j, "jobs", "show", f.running, "-q", "mail")
	require.Equal(t, f.running, j.ID)
	require.Equal(t, baton.JobStateRunning, j.State)
	require.JSONEq(t, `{"to":"c@x"}`, string(j.Args))
	require.NotNil(t, j.LeaseUntil)
	require.NotContains(t, f.run("jobs", "show", f.running, "--json").stdout, "lease\"", "the lease is a secret")
	require.Nil(t, j.Output)

	// A completed job's output (baton.RecordOutput).
	ctx := context.Background()
	fetched, err := f.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "default", Max: 1, LeaseTTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, fetched.Jobs, 1)
	done := fetched.Jobs[0]
	_, err = f.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: "default", Retention: time.Hour, Finished: []*batondriver.JobFinish{
		{JobLease: batondriver.JobLease{ID: done.ID, Lease: done.Lease}, Outcome: batondriver.JobOutcomeCompleted, Output: []byte(`{"sent":true}`)},
	}})
	require.NoError(t, err)
	r = f.run("jobs", "show", done.ID)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Output:\s+\{"sent":true\}\n`, r.stdout)
	f.runJSON(&j, "jobs", "show", done.ID)
	require.JSONEq(t, `{"sent":true}`, string(j.Output))

	r = f.run("jobs", "show", "01NOSUCHJOB0000000000000000")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, "not found in any queue")
	r = f.run("jobs", "show", f.dead, "-q", "default")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, `not found in queue "default"`)
	r = f.run("jobs", "show")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "missing argument")
}

func testJobsRetryDelete(t *testing.T, bin string) {
	f := seeded(t, bin)
	r := f.run("jobs", "retry", f.dead)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "retried "+f.dead+"\n", r.stdout)
	var j jobOut
	f.runJSON(&j, "jobs", "show", f.dead)
	require.Equal(t, baton.JobStateAvailable, j.State)
	require.Zero(t, j.Attempt)

	r = f.run("jobs", "retry", f.running)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "is running: only scheduled, available, cancelled, dead and dropped jobs can be retried")

	r = f.run("jobs", "delete", f.running)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "is running and cannot be deleted")

	// Several at once: the ones that can be are, and the first failure
	// sets the exit code.
	var out bulkOut
	r = f.run("jobs", "delete", f.available, "01NOSUCHJOB0000000000000000", f.delayed, "--json")
	require.Equal(t, exitNotFound, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, []string{f.available, f.delayed}, out.Done)
	require.Len(t, out.Failed, 1)
	require.Equal(t, exitNotFound, out.Failed[0].ExitCode)
	require.Equal(t, exitNotFound, f.run("jobs", "show", f.available).code)
}

func testJobsCancel(t *testing.T, bin string) {
	f := seeded(t, bin)
	r := f.run("jobs", "cancel", f.delayed)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "cancelled "+f.delayed+"\n", r.stdout)
	var j jobOut
	f.runJSON(&j, "jobs", "show", f.delayed)
	require.Equal(t, baton.JobStateCancelled, j.State)
	require.Equal(t, "cancelled by the admin API", j.Errors[0].Error)

	// A running job is asked to stop, and shows it until it does.
	r = f.run("jobs", "cancel", f.running, "-q", "mail")
	require.Equal(t, exitOK, r.code, r.stderr)
	r = f.run("jobs", "show", f.running)
	require.Regexp(t, `State:\s+running`, r.stdout)
	require.Regexp(t, `Cancel requested:\s+\S`, r.stdout)
	f.runJSON(&j, "jobs", "show", f.running)
	require.NotNil(t, j.CancelRequestedAt)

	r = f.run("jobs", "cancel", f.dead)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "is dead: only scheduled, parked, available and running jobs can be cancelled")

	var out bulkOut
	r = f.run("jobs", "cancel", f.available, "01NOSUCHJOB0000000000000000", "--json")
	require.Equal(t, exitNotFound, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Equal(t, []string{f.available}, out.Done)
	require.Len(t, out.Failed, 1)
}

func testPauseResume(t *testing.T, bin string) {
	f := seeded(t, bin)
	paused := func() bool {
		var out struct{ Queues []queueOut }
		f.runJSON(&out, "queues")
		return out.Queues[1].Paused
	}
	r := f.run("queue", "pause", "mail")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "queue mail paused\n", r.stdout)
	require.True(t, paused())
	s, err := f.client.QueueStats(context.Background(), "mail")
	require.NoError(t, err)
	require.True(t, s.Paused, "the library sees it too")

	var out map[string]any
	f.runJSON(&out, "queue", "resume", "mail")
	require.Equal(t, map[string]any{"queue": "mail", "paused": false}, out)
	require.False(t, paused())

	r = f.run("queue", "pause", "nosuch")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, `queue "nosuch" not found`)
	require.Equal(t, exitUsage, f.run("queue", "pause").code)
	require.Equal(t, exitUsage, f.run("queue", "pause", "a", "b").code)
	require.Equal(t, exitUsage, f.run("queue").code)
	require.Equal(t, exitUsage, f.run("queue", "stop", "mail").code)
}

func testDead(t *testing.T, bin string) {
	f := seeded(t, bin)
	var page jobListOut
	f.runJSON(&page, "dead", "list")
	require.Equal(t, 1, page.Total)
	require.Equal(t, f.dead, page.Jobs[0].ID)

	r := f.run("dead", "retry", f.available)
	require.Equal(t, exitFailed, r.code)
	require.Contains(t, r.stderr, "not in the dead set")
	require.Equal(t, exitUsage, f.run("dead", "retry").code)
	require.Equal(t, exitUsage, f.run("dead", "retry", f.dead, "--all").code)

	var retried map[string]int
	f.runJSON(&retried, "dead", "retry", "--all", "-q", "mail")
	require.Equal(t, map[string]int{"retried": 1}, retried)
	r = f.run("dead", "list")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no jobs (0 in all)\n", r.stdout)

	// Kill two jobs, then purge them.
	ctx := context.Background()
	fetched, err := f.driver.JobFetch(ctx, &batondriver.JobFetchParams{Queue: "mail", Max: 2, LeaseTTL: time.Minute})
	require.NoError(t, err)
	var fin []*batondriver.JobFinish
	for _, j := range fetched.Jobs {
		fin = append(fin, &batondriver.JobFinish{JobLease: batondriver.JobLease{ID: j.ID, Lease: j.Lease}, Outcome: batondriver.JobOutcomeCancel, Error: "no"})
	}
	_, err = f.driver.JobFinish(ctx, &batondriver.JobFinishParams{Queue: "mail", Finished: fin})
	require.NoError(t, err)

	r = f.run("dead", "purge")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--yes")
	r = f.run("dead", "purge", "--yes")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "deleted 2 jobs\n", r.stdout)
	f.runJSON(&page, "dead", "list", "-q", "mail")
	require.Zero(t, page.Total)
}

func testLocks(t *testing.T, bin string) {
	f := setup(t, bin)
	ctx := context.Background()
	locker, err := batonlock.New(f.driver, nil)
	require.NoError(t, err)
	lease, err := locker.TryAcquire(ctx, "sync:user:42", &batonlock.AcquireOpts{Limit: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lease.Release(ctx) })

	var out lockOut
	f.runJSON(&out, "locks", "show", "sync:user:42")
	require.Equal(t, "sync:user:42", out.Key)
	require.Equal(t, 2, out.Limit)
	require.False(t, out.Override)
	require.Equal(t, lease.Fence(), out.LastFence)
	require.Len(t, out.Holders, 1)
	require.Equal(t, lease.Fence(), out.Holders[0].Fence)
	require.Equal(t, lease.Token(), out.Holders[0].Token)
	require.Positive(t, out.Holders[0].TTLMillis)

	require.NoError(t, locker.SetLimit(ctx, "sync:user:42", 0))
	r := f.run("locks", "show", "sync:user:42")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "the key is halted")
	require.Regexp(t, `Holders:\s+1`, r.stdout)
	require.NotContains(t, r.stdout, lease.Token(), "tables show a token's start only")

	// A key with a tab and a newline is quoted, so that the table holds.
	odd, err := locker.TryAcquire(ctx, "odd\tkey\nhere", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = odd.Release(ctx) })
	r = f.run("locks", "show", "odd\tkey\nhere")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Regexp(t, `Key:\s+"odd\\tkey\\nhere"\n`, r.stdout)

	r = f.run("locks", "show", "never:used")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, `lock key "never:used" not found`)
	r = f.run("locks", "show", "")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "bad KEY: a lock key has 1 to 4096 bytes, not 0")
	r = f.run("locks", "show", strings.Repeat("k", 4097))
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "not 4097")
}

func testEnvironment(t *testing.T, bin string) {
	f := seeded(t, bin)
	r := cli(t, bin, []string{"BATON_REDIS_URL=" + f.redis, "BATON_PREFIX=" + f.prefix}, "queues")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "mail")
	// Another prefix is another namespace: no queues there.
	r = cli(t, bin, []string{"BATON_REDIS_URL=" + f.redis, "BATON_PREFIX=" + f.prefix + "x"}, "queues")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Contains(t, r.stdout, "no queues yet")
	// --redis overrides the environment.
	r = cli(t, bin, []string{"BATON_REDIS_URL=redis://127.0.0.1:1"}, "--redis", f.redis, "--prefix", f.prefix, "queues")
	require.Equal(t, exitOK, r.code, r.stderr)
}

func testBadInput(t *testing.T, bin string) {
	f := seeded(t, bin)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"jobs", "list", "--limit", "abc"}, `invalid argument "abc" for "--limit" flag: not a whole number`},
		{[]string{"jobs", "list", "--limit", "5000"}, "out of range 1..1000"},
		{[]string{"jobs", "list", "--limit", "-3"}, "out of range 1..1000"},
		{[]string{"jobs", "list", "--offset", "1.5"}, "not a whole number"},
		{[]string{"jobs", "list", "--limit", "800", "--offset", "300"}, "page one queue and state with baton jobs list -q QUEUE --state STATE"},
		{[]string{"jobs", "list", "--state", "bogus"}, `unknown --state "bogus"`},
		{[]string{"jobs", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"jobs", "frob"}, `unknown command "frob"`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"queues", "extra"}, `unexpected argument "extra"`},
		{[]string{"queues", "--timeout", "soon"}, `invalid argument "soon"`},
		{[]string{"queues", "--timeout", "-5s"}, "--timeout -5s: want a duration from 0 (never)"},
		{[]string{"jobs", "show", ""}, "empty job ID"},
	} {
		r := f.run(tc.args...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
		require.Empty(t, r.stdout, tc.args)
	}

	for _, tc := range []struct {
		redis []string
		want  string
	}{
		{[]string{"http://127.0.0.1:1"}, `bad --redis URL "http://127.0.0.1:1"`},
		{[]string{"redis://127.0.0.1:1/notadb"}, "invalid database number"},
		{[]string{"redis://127.0.0.1:1", "redis://127.0.0.1:2/3"}, "give only host:port"},
		{nil, "no Redis given"},
	} {
		var args []string
		for _, v := range tc.redis {
			args = append(args, "--redis", v)
		}
		r := cli(t, bin, nil, append(args, "queues")...)
		require.Equal(t, exitUsage, r.code, "%v: %s", tc.redis, r.stderr)
		require.Contains(t, r.stderr, tc.want)
	}
	r := f.run("--prefix", "a{b}", "queues")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "must not contain")
	r = f.run("--tls-ca", "/nonexistent.pem", "queues")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "--tls-ca needs a rediss:// URL")
}

func testUnreachable(t *testing.T, bin string) {
	// A port that was free a moment ago refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	r := cli(t, bin, nil, "--redis", "redis://"+addr, "queues")
	require.Equal(t, exitUnreachable, r.code)
	require.Contains(t, r.stderr, "cannot reach Redis at redis://"+addr)
	require.Contains(t, r.stderr, "connection refused")

	r = cli(t, bin, nil, "--redis", "redis://user:hunter2@"+addr, "jobs", "show", "X", "--json")
	require.Equal(t, exitUnreachable, r.code)
	require.NotContains(t, r.stderr, "hunter2")
	var e struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stderr), &e), r.stderr)
	require.Equal(t, exitUnreachable, e.ExitCode)
	require.Empty(t, r.stdout)

	// Bad usage is found before connecting: exit 2, not 4.
	for _, args := range [][]string{
		{"jobs", "list", "--state", "bogus"},
		{"dead", "purge"},
		{"dead", "retry"},
		{"dead", "retry", "X", "--all"},
	} {
		r = cli(t, bin, nil, append([]string{"--redis", "redis://" + addr}, args...)...)
		require.Equal(t, exitUsage, r.code, "%v: %s", args, r.stderr)
	}

	// A server that accepts connections but answers nothing (SIGSTOP):
	// --timeout bounds the wait.
	srv := redistest.StartT(t, nil)
	require.NoError(t, srv.Pause())
	start := time.Now()
	r = cli(t, bin, nil, "--redis", "redis://"+srv.Addr(), "--timeout", "300ms", "stats")
	require.Equal(t, exitUnreachable, r.code, r.stderr)
	require.Contains(t, r.stderr, "no answer within 300ms")
	require.Less(t, time.Since(start), 5*time.Second)
}

func testCluster(t *testing.T, bin string) {
	addrs := redistest.SharedCluster(t).Addrs()
	// One comma-separated --redis...
	f := seed(newFixture(t, bin, "redis://"+strings.Join(addrs, ","), addrs...))
	var s statsOut
	f.runJSON(&s, "stats")
	require.Equal(t, 2, s.Queues)
	require.Equal(t, 1, s.Retrying)
	require.Equal(t, 1, s.Dead)
	require.Equal(t, exitOK, f.run("dead", "retry", f.dead).code)
	require.Equal(t, exitOK, f.run("queue", "pause", "default").code)

	// ...or --redis once per node.
	args := []string{"--prefix", f.prefix}
	for _, a := range addrs {
		args = append(args, "--redis", a)
	}
	var out struct{ Queues []queueOut }
	r := cli(t, bin, nil, append(args, "queues", "--json")...)
	require.Equal(t, exitOK, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.Len(t, out.Queues, 2)
	require.True(t, out.Queues[0].Paused)
	require.Equal(t, 2, out.Queues[1].Available, "the retried job is available again")
}

func testEmptyBackend(t *testing.T, bin string) {
	f := setup(t, bin)
	r := f.run("queues")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "no queues yet: none has had a job\n", r.stdout)
	var s statsOut
	f.runJSON(&s, "stats")
	require.Equal(t, statsOut{RetryingExact: true}, s)
	r = f.run("jobs", "show", "X")
	require.Equal(t, exitNotFound, r.code)
	r = f.run("queue", "pause", "default")
	require.Equal(t, exitNotFound, r.code)
	require.Contains(t, r.stderr, "there are no queues yet")
	r = f.run("dead", "purge", "--yes")
	require.Equal(t, exitOK, r.code, r.stderr)
	require.Equal(t, "deleted 0 jobs\n", r.stdout)
}

func testJSONError(t *testing.T, bin string) {
	f := seeded(t, bin)
	r := f.run("jobs", "show", "NOPE", "--json")
	require.Equal(t, exitNotFound, r.code)
	require.Empty(t, r.stdout)
	require.JSONEq(t, `{"error": "job NOPE not found in any queue", "exit_code": 3}`, r.stderr)
	r = f.run("jobs", "list", "--limit", "x", "--json")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, `"exit_code":2`)
}

// functions prune deletes another version's job functions and keeps the
// running version's (on a server of its own: functions are server-wide).
func testFunctions(t *testing.T, bin string) {
	addr := redistest.StartT(t, nil).Addr()
	f := newFixture(t, bin, "redis://"+addr, addr)
	ctx := context.Background()
	_, err := f.client.Insert(ctx, email{}, nil) // loads this version's library
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	require.NoError(t, err)
	defer rc.Close()
	const old = "baton_0123456789ab"
	code := "#!lua name=" + old + "\nredis.register_function('" + old + "_f', function() return 1 end)"
	require.NoError(t, rc.Do(ctx, rc.B().FunctionLoad().FunctionCode(code).Build()).Error())

	r := f.run("functions", "prune")
	require.Equal(t, exitOK, r.code, "stderr: %s", r.stderr)
	require.Equal(t, "deleted "+old+"\n", r.stdout)
	var out struct{ Deleted []string }
	f.runJSON(&out, "functions", "prune")
	require.Equal(t, []string{}, out.Deleted)
	libs, err := rc.Do(ctx, rc.B().FunctionList().Libraryname("baton_*").Build()).ToArray()
	require.NoError(t, err)
	require.Len(t, libs, 1, "this version's library is kept")
	_, err = f.client.Insert(ctx, email{}, nil)
	require.NoError(t, err)
}

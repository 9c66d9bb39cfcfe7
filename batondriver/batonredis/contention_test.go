package batonredis

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The contention tests are the proof that Baton's locks hold under load:
// processes and goroutines contend on mutexes and semaphores of 3, every
// grant and release is recorded (internal/lockcheck) and the merged history
// is checked for overlap, fence order, FIFO order and linearizability. The
// Broken tests run the same checks on deliberately broken scripts and
// require that the checkers catch them, so that a pass means something.

// contentionKeys are two mutexes and two semaphores of 3. On a 3-master
// cluster from redistest their slots (4878, 9069, 13223, 9094) are served by
// every master.
var contentionKeys = []lockcheck.Key{
	{Name: "mutex-a", Limit: 1}, {Name: "mutex-b", Limit: 1},
	{Name: "sem-b", Limit: 3}, {Name: "sem-c", Limit: 3},
}

// Environment of a lockcontender child.
const (
	envContendAddr     = "BATON_CONTEND_ADDR"
	envContendPrefix   = "BATON_CONTEND_PREFIX"
	envContendProc     = "BATON_CONTEND_PROC"
	envContendSeed     = "BATON_CONTEND_SEED"
	envContendDuration = "BATON_CONTEND_DURATION"
	envContendLog      = "BATON_CONTEND_LOG"
	// envContendProgress, if set, names a file for the workload's
	// progress events (lockcheck.Workload.Progress); both files are then
	// written one event at a time, for a child that may be killed.
	envContendProgress = "BATON_CONTEND_PROGRESS"
)

func init() { children["lockcontender"] = runLockContender }

// contenderWorkload is the workload of each process of TestContention. A
// goroutine makes about 40 operations a second; MaxOps only stops a run
// that went wrong.
func contenderWorkload(proc int, seed uint64, d time.Duration) lockcheck.Workload {
	return lockcheck.Workload{
		Proc: proc, Keys: contentionKeys, Goroutines: 24, Duration: d,
		MaxOps: max(400, int(d/time.Second)*100), Seed: seed, MaxWait: 300 * time.Millisecond,
	}
}

// runLockContender is a child process of TestContention.
func runLockContender() int { return runWorkloadChild("lockcontender", contenderWorkload, nil, nil) }

// runWorkloadChild is a child process that runs a lockcheck workload: it
// connects, says "ready" on stdout, waits for "go" on stdin, runs the
// workload that workload returns with a Locker of cfg (on the driver that
// wrap returns, if wrap is not nil), and writes its history as JSON lines
// to the log file.
func runWorkloadChild(role string, workload func(proc int, seed uint64, d time.Duration) lockcheck.Workload, cfg *batonlock.Config, wrap func(batondriver.LockDriver) batondriver.LockDriver) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, role+": "+format+"\n", args...)
		return 1
	}
	proc, err1 := strconv.Atoi(os.Getenv(envContendProc))
	seed, err2 := strconv.ParseUint(os.Getenv(envContendSeed), 10, 64)
	dur, err3 := time.ParseDuration(os.Getenv(envContendDuration))
	if err := errors.Join(err1, err2, err3); err != nil {
		return fail("bad environment: %v", err)
	}
	// Never outlive the parent's patience, whatever happens.
	time.AfterFunc(dur+time.Minute, func() {
		fmt.Fprintln(os.Stderr, role+": overran; exiting")
		os.Exit(3)
	})
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{os.Getenv(envContendAddr)}})
	if err != nil {
		return fail("client: %v", err)
	}
	defer client.Close()
	d, err := New(client, &Config{Prefix: os.Getenv(envContendPrefix)})
	if err != nil {
		return fail("driver: %v", err)
	}
	defer d.Close()
	var ld batondriver.LockDriver = d
	if wrap != nil {
		ld = wrap(d)
	}
	locker, err := batonlock.New(ld, cfg)
	if err != nil {
		return fail("locker: %v", err)
	}
	f, err := os.Create(os.Getenv(envContendLog))
	if err != nil {
		return fail("%v", err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = client.Do(ctx, client.B().Ping().Build()).Error()
	cancel()
	if err != nil {
		return fail("ping: %v", err)
	}

	fmt.Println("ready")
	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
		return fail("no go from the parent: %q, %v", line, err)
	}
	rec, w := lockcheck.NewRecorder(f), workload(proc, seed, dur)
	if path := os.Getenv(envContendProgress); path != "" {
		pf, err := os.Create(path)
		if err != nil {
			return fail("%v", err)
		}
		defer pf.Close()
		rec, w.Progress = lockcheck.NewSyncedRecorder(f), lockcheck.NewSyncedRecorder(pf).Record
	}
	runErr := w.Run(context.Background(), locker, rec)
	if err := errors.Join(rec.Flush(), f.Close()); err != nil {
		return fail("writing the history: %v", err)
	}
	if runErr != nil {
		return fail("workload: %v", runErr)
	}
	return 0
}

// contenderProc is a started lockcontender.
type contenderProc struct {
	cmd    *exec.Cmd
	log    string
	stdin  io.WriteCloser
	ready  *contenderStdout
	stderr bytes.Buffer
	done   chan error
}

// contenderStdout is a child's stdout; it closes ch when "ready" arrives.
type contenderStdout struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
	ch   chan struct{}
}

func (w *contenderStdout) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "ready\n") {
		w.once.Do(func() { close(w.ch) })
	}
	return len(p), nil
}

// startContender starts a child in role (lockcontender, or another that
// runWorkloadChild runs) as process proc, with env added to its
// environment, and waits until it is ready.
func startContender(ctx context.Context, t *testing.T, role string, proc int, addr, prefix string, seed uint64, dur time.Duration, env ...string) *contenderProc {
	t.Helper()
	c := &contenderProc{
		log:   filepath.Join(t.TempDir(), fmt.Sprintf("proc%d.jsonl", proc)),
		ready: &contenderStdout{ch: make(chan struct{})},
		done:  make(chan error, 1),
	}
	c.cmd = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(),
		"BATON_CHILD="+role,
		envContendAddr+"="+addr,
		envContendPrefix+"="+prefix,
		envContendProc+"="+strconv.Itoa(proc),
		envContendSeed+"="+strconv.FormatUint(seed, 10),
		envContendDuration+"="+dur.String(),
		envContendLog+"="+c.log,
	)
	c.cmd.Env = append(c.cmd.Env, env...)
	c.cmd.Stdout, c.cmd.Stderr = c.ready, &c.stderr
	c.cmd.WaitDelay = 5 * time.Second
	stdin, err := c.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdin = stdin
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting contender %d: %v", proc, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	select {
	case <-c.ready.ch:
	case err := <-c.done:
		t.Fatalf("contender %d exited before it was ready: %v\n%s", proc, err, c.stderr.String())
	case <-ctx.Done():
		t.Fatalf("contender %d not ready: %v", proc, ctx.Err())
	}
	return c
}

// wait waits for the child to exit and fails the test if it failed.
func (c *contenderProc) wait(t *testing.T) {
	t.Helper()
	if err := <-c.done; err != nil {
		t.Fatalf("contender %s failed: %v\n%s", c.log, err, c.stderr.String())
	}
}

// startLockRun starts what a multi-process lock test of dur shares: a
// private Redis, a key prefix and a seed of its own (logged, to replay a
// run), and a context that bounds the run, ended when the test ends.
func startLockRun(t *testing.T, dur time.Duration) (*redistest.Server, string, uint64, context.Context) {
	t.Helper()
	srv := redistest.StartT(t, nil)
	prefix := "t" + randomHex(6)
	seed := uint64(time.Now().UnixNano())
	t.Logf("prefix %s, seed %d, %v", prefix, seed, dur)
	ctx, cancel := context.WithTimeout(t.Context(), dur+time.Minute)
	t.Cleanup(cancel)
	return srv, prefix, seed, ctx
}

// TestContention: two child processes and the test's own goroutines (64 in
// all) contend on a private Redis for a few seconds; their merged history
// must pass every checker.
//
// BATON_CONTENTION_DURATION (a Go duration, default 4s) lengthens the run
// for a soak test.
func TestContention(t *testing.T) {
	t.Parallel()
	dur := envDuration(t, "BATON_CONTENTION_DURATION", 4*time.Second)
	srv, prefix, seed, ctx := startLockRun(t, dur)

	kids := []*contenderProc{
		startContender(ctx, t, "lockcontender", 1, srv.Addr(), prefix, seed, dur),
		startContender(ctx, t, "lockcontender", 2, srv.Addr(), prefix, seed, dur),
	}
	d, err := New(newClient(t, srv.Addr()), &Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	locker := contentionLocker(t, d)

	for _, c := range kids {
		if _, err := io.WriteString(c.stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.stdin.Close()
	}
	rec := lockcheck.NewRecorder(nil)
	w := contenderWorkload(0, seed, dur)
	w.Goroutines = 16
	if err := w.Run(ctx, locker, rec); err != nil {
		t.Error(err)
	}
	logs := make([]string, len(kids))
	for i, c := range kids {
		c.wait(t)
		logs[i] = c.log
	}
	h, err := lockcheck.ReadFiles(logs...)
	if err != nil {
		t.Fatal(err)
	}
	h = append(h, rec.Events()...)
	contentionCheck(t, h, 3)
}

// TestContentionCluster: two drivers on their own clients (standing for two
// processes) contend on a real 3-master Redis Cluster.
func TestContentionCluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartClusterT(t)
	prefix := "t" + randomHex(6)
	seed := uint64(time.Now().UnixNano())
	t.Logf("prefix %s, seed %d", prefix, seed)
	var lockers []*batonlock.Locker
	for range 2 {
		d, err := New(newClient(t, cluster.Addrs()...), &Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		lockers = append(lockers, contentionLocker(t, d))
	}
	w := lockcheck.Workload{
		Keys: contentionKeys, Goroutines: 16, Duration: 3 * time.Second, MaxOps: 400, Seed: seed,
	}
	contentionCheck(t, contentionRun(t, lockers, w), 2)
}

// contentionRun runs w on each locker at once, the i-th as process i, and
// returns the merged history.
func contentionRun(t *testing.T, lockers []*batonlock.Locker, w lockcheck.Workload) []lockcheck.Event {
	t.Helper()
	rec := lockcheck.NewRecorder(nil)
	var wg sync.WaitGroup
	for i, l := range lockers {
		w := w
		w.Proc = i
		wg.Go(func() {
			if err := w.Run(t.Context(), l, rec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return rec.Events()
}

// contentionCheck fails the test if h shows too little contention to prove
// anything, or if any checker reports a violation.
func contentionCheck(t *testing.T, h []lockcheck.Event, procs int) {
	t.Helper()
	historyCheck(t, h, nil, func(s lockcheck.Summary) bool {
		return s.Procs == procs && s.Grants >= 200 && s.Queued > 0 && s.TryFailed > 0
	})
}

// historyCheck fails the test if h's summary is not enough to prove
// anything, or if any check with opts reports a violation.
func historyCheck(t *testing.T, h []lockcheck.Event, opts *lockcheck.Options, enough func(lockcheck.Summary) bool) {
	t.Helper()
	s := lockcheck.Summarize(h)
	t.Log(s)
	if !enough(s) {
		t.Errorf("too little happened to prove anything: %v", s)
	}
	start := time.Now()
	err := lockcheck.Check(h, opts)
	t.Logf("checked in %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%v\n%v", s, err)
	}
}

func contentionLocker(t *testing.T, d batondriver.LockDriver) *batonlock.Locker {
	t.Helper()
	l, err := batonlock.New(d, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// contentionMustCatch runs rounds of a workload on a broken variant until the
// checkers report a violation, and fails the test if none is found within
// a deadline.
func contentionMustCatch(t *testing.T, round func(n int) []lockcheck.Event) {
	t.Helper()
	opts := &lockcheck.Options{LinearizabilityTimeout: 5 * time.Second}
	contentionMustCatchWithin(t, 20*time.Second, func(n int) ([]lockcheck.Event, *lockcheck.Options) { return round(n), opts })
}

// contentionMustCatchWithin is contentionMustCatch with the time it gives
// the rounds, each of which returns its history and the options to check
// it with.
func contentionMustCatchWithin(t *testing.T, within time.Duration, round func(n int) ([]lockcheck.Event, *lockcheck.Options)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for n := 0; time.Now().Before(deadline); n++ {
		h, opts := round(n)
		err := lockcheck.Check(h, opts)
		if err == nil {
			t.Logf("round %d: no violation yet (%v)", n, lockcheck.Summarize(h))
			continue
		}
		var checks []string
		for _, v := range lockcheck.Violations(err) {
			checks = append(checks, fmt.Sprintf("%s (%d)", v.Check, v.Count))
		}
		t.Logf("round %d (%v): caught by %s:\n%v", n, lockcheck.Summarize(h), strings.Join(checks, ", "), err)
		return
	}
	t.Fatal("the checkers found no violation in a deliberately broken variant")
}

func brokenScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBrokenReleaseDel: release.lua replaced by a plain DEL of the holders
// set without a token check. On semaphores of 3 one release drops the other
// holders too, and their slots go to waiters while they still hold them.
func TestBrokenReleaseDel(t *testing.T) {
	t.Parallel()
	d := newDriver(t, newClient(t, redistest.SharedServer(t).Addr()))
	s := *defaultScripts
	s.release = compile(brokenScript(t, "release_del.lua"))
	d.scripts = &s
	locker := contentionLocker(t, d)
	contentionMustCatch(t, func(n int) []lockcheck.Event {
		w := lockcheck.Workload{
			Keys: []lockcheck.Key{
				{Name: fmt.Sprintf("del-%d-a", n), Limit: 3},
				{Name: fmt.Sprintf("del-%d-b", n), Limit: 3},
			},
			Goroutines: 16, Duration: 500 * time.Millisecond, MaxOps: 200, Seed: uint64(n),
			MaxWait: 200 * time.Millisecond,
		}
		return contentionRun(t, []*batonlock.Locker{locker}, w)
	})
}

// TestBrokenLIFO: lua/lib.lua's promote grants a freed slot to the newest
// waiter instead of the oldest. Slots are never overfilled, so only the FIFO
// checker can catch it.
func TestBrokenLIFO(t *testing.T) {
	t.Parallel()
	const fifo = "local head = redis.call('ZPOPMIN', W)[1]"
	if strings.Count(luaLib, fifo) != 1 {
		t.Fatalf("lua/lib.lua no longer picks the head of the queue with %q: update this test", fifo)
	}
	lib := strings.Replace(luaLib, fifo, "local head = redis.call('ZPOPMAX', W)[1] -- BROKEN: the newest waiter", 1)
	compileLIFO := func(body string) *rueidis.Lua { return rueidis.NewLuaScript(lib + "\n" + body) }
	d := newDriver(t, newClient(t, redistest.SharedServer(t).Addr()))
	d.scripts = &scripts{
		acquire:  compileLIFO(luaAcquire),
		release:  compileLIFO(luaRelease),
		extend:   compileLIFO(luaExtend),
		setLimit: compileLIFO(luaSetLimit),
		inspect:  defaultScripts.inspect,
	}
	locker := contentionLocker(t, d)
	contentionMustCatch(t, func(n int) []lockcheck.Event {
		w := lockcheck.Workload{
			Keys:       []lockcheck.Key{{Name: fmt.Sprintf("lifo-%d-a", n), Limit: 1}, {Name: fmt.Sprintf("lifo-%d-b", n), Limit: 3}},
			Goroutines: 16, Duration: 500 * time.Millisecond, MaxOps: 200, Seed: uint64(n),
			MaxWait: 200 * time.Millisecond,
		}
		return contentionRun(t, []*batonlock.Locker{locker}, w)
	})
}

// brokenClockSkew is how far ahead the skewed process's clock runs in
// TestBrokenClientClock: more than the lease TTL, so that it sees every
// other process's holders as expired.
const (
	brokenClockSkew = 3 * time.Second
	brokenClockTTL  = time.Second
)

// TestBrokenClientClock: acquire takes "now" from the caller's clock instead
// of the server's. Two drivers (standing for two processes) contend; one's
// clock runs 3s ahead, so it takes live leases of 1s for expired and grants
// their slots again.
func TestBrokenClientClock(t *testing.T) {
	t.Parallel()
	addr := redistest.SharedServer(t).Addr()
	prefix := "t" + randomHex(6)
	script := compile(clientClockAcquire(t))
	var lockers []*batonlock.Locker
	for _, skew := range []time.Duration{0, brokenClockSkew} {
		d, err := New(newClient(t, addr), &Config{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		lockers = append(lockers, contentionLocker(t, &brokenClockDriver{Driver: d, acquireScript: script, skew: skew}))
	}
	contentionMustCatch(t, func(n int) []lockcheck.Event {
		w := lockcheck.Workload{
			Keys: []lockcheck.Key{
				{Name: fmt.Sprintf("clock-%d-a", n), Limit: 1},
				{Name: fmt.Sprintf("clock-%d-b", n), Limit: 3},
			},
			Goroutines: 8, Duration: 500 * time.Millisecond, MaxOps: 200, Seed: uint64(n),
			MaxWait: 200 * time.Millisecond, TTL: brokenClockTTL,
		}
		return contentionRun(t, lockers, w)
	})
}

// clientClockAcquire is lua/acquire.lua with one change: "now" is the
// caller's wall clock (ARGV[9], ms) instead of the server's TIME, as lock
// libraries that trust client clocks do. A caller whose clock runs ahead
// sees live holders as expired and grants their slots again. Derived from
// the real script, so it breaks exactly that one thing.
func clientClockAcquire(t *testing.T) string {
	t.Helper()
	const real = "local now = now_ms()\n"
	if !strings.Contains(luaAcquire, real) {
		t.Fatal("lua/acquire.lua no longer reads the time as the broken variant expects")
	}
	return strings.Replace(luaAcquire, real, "local now = tonumber(ARGV[9]) -- BROKEN: the client's clock, not TIME\n", 1)
}

// brokenClockDriver is a Driver whose LockAcquire runs the broken client-clock
// script with its own clock, skew ahead of the real one.
type brokenClockDriver struct {
	*Driver
	acquireScript *rueidis.Lua
	skew          time.Duration
}

func (c *brokenClockDriver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	now := time.Now().Add(c.skew).UnixMilli()
	return c.acquire(ctx, p, c.acquireScript, strconv.FormatInt(now, 10))
}

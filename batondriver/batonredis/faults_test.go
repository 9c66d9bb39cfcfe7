package batonredis

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/redistest"
)

// Fault tests: a holder process killed, a holder cut off by a network
// partition, a Redis server paused (SIGSTOP), killed and restarted, and a
// Cluster master paused. Each test that stops a server or partitions a
// client starts its own server.

func init() {
	children["lockholder"] = faultLockholder
}

// faultLockholder is the child role of TestFaultHolderKilled. It takes the
// lock named by the environment (childLease), prints "held FENCE", and
// then blocks until it is killed. Should its parent die without killing
// it, stdin reaches EOF and it exits.
func faultLockholder() int {
	_, lease, err := childLease()
	if err != nil {
		fmt.Fprintln(os.Stderr, "lockholder:", err)
		return 1
	}
	fmt.Printf("held %d\n", lease.Fence())
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Fprintln(os.Stderr, "lockholder: stdin closed before SIGKILL")
	return 1
}

// childLease is the start of a lock holding child: it takes the lock
// named by the environment (BATON_REDIS_ADDR, BATON_PREFIX, BATON_KEY,
// BATON_TTL) with a heartbeat at the default interval, and returns its
// client and lease. The process ends without closing them.
func childLease() (rueidis.Client, *batonlock.Lease, error) {
	ttl, err := time.ParseDuration(os.Getenv("BATON_TTL"))
	if err != nil {
		return nil, nil, err
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{os.Getenv("BATON_REDIS_ADDR")}})
	if err != nil {
		return nil, nil, err
	}
	d, err := New(client, &Config{Prefix: os.Getenv("BATON_PREFIX")})
	if err != nil {
		return nil, nil, err
	}
	l, err := batonlock.New(d, &batonlock.Config{TTL: ttl})
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.TryAcquire(ctx, os.Getenv("BATON_KEY"), nil)
	return client, lease, err
}

// faultBuffer is a bytes.Buffer safe to read while a child writes to it.
type faultBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *faultBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *faultBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// faultCountingDriver counts LockAcquire calls, to show that a waiter does
// not poll.
type faultCountingDriver struct {
	batondriver.LockDriver
	acquires atomic.Int64
}

func (c *faultCountingDriver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	c.acquires.Add(1)
	return c.LockDriver.LockAcquire(ctx, p)
}

// faultTimerSlack is how late a lease's context may be cancelled after its
// Until on a loaded machine. The cancellation is a timer in the holder's own
// process set to Until; under -race, with the other tests and their Redis
// servers competing for two CPUs, it has been seen to fire 44ms late. What
// the library controls, Until itself, the tests check exactly.
const faultTimerSlack = 150 * time.Millisecond

// faultDriver is newDriver with a given prefix, to share locks with a child.
func faultDriver(t *testing.T, client rueidis.Client, prefix string) *Driver {
	t.Helper()
	d, err := New(client, &Config{Prefix: prefix})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	return d
}

// faultServer starts a private server and a client for it. The client is
// closed before the server, and the server is resumed before that, so a
// test that fails while the server is paused does not hang its cleanup.
func faultServer(t *testing.T) (*redistest.Server, rueidis.Client) {
	t.Helper()
	srv := redistest.StartT(t, nil)
	client := newClient(t, srv.Addr())
	t.Cleanup(func() { _ = srv.Resume() })
	return srv, client
}

// faultWait waits for ch to close, failing the test after limit.
func faultWait(t *testing.T, ch <-chan struct{}, limit time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(limit):
		require.FailNowf(t, "timed out", "%s: not within %v", what, limit)
	}
}

// faultEnded reports when lease's context is cancelled, measured as it
// happens rather than when the test gets round to looking.
func faultEnded(lease *batonlock.Lease) <-chan time.Time {
	ch := make(chan time.Time, 1)
	context.AfterFunc(lease.Context(), func() { ch <- time.Now() })
	return ch
}

// faultEndedAt waits for the time faultEnded reports, failing the test
// after limit.
func faultEndedAt(t *testing.T, ended <-chan time.Time, limit time.Duration, what string) time.Time {
	t.Helper()
	select {
	case at := <-ended:
		return at
	case <-time.After(limit):
		require.FailNowf(t, "timed out", "%s: not within %v", what, limit)
		return time.Time{}
	}
}

// faultReleaseLater releases lease when the test ends, before its client is
// closed, so that a test failing half-way leaves no heartbeat running.
// Release is idempotent, so an explicit Release in the test is still checked.
func faultReleaseLater(t *testing.T, lease *batonlock.Lease) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = lease.Release(ctx)
	})
}

// faultServerExpiry reads the server's own expiry of lease on key through
// client: on the same host's clock as the test's.
func faultServerExpiry(t *testing.T, client rueidis.Client, d *Driver, key string, lease *batonlock.Lease) time.Time {
	t.Helper()
	return faultServerExpiryOf(t, client, d, key, lease.Fence(), lease.Token())
}

// faultServerExpiryOf is faultServerExpiry of the lease with fence and
// token, held by another process.
func faultServerExpiryOf(t *testing.T, client rueidis.Client, d *Driver, key string, fence uint64, token string) time.Time {
	t.Helper()
	h := d.lockKeys(key).keys[0]
	member := fmt.Sprintf("%d:%s", fence, token)
	score, err := client.Do(t.Context(), client.B().Zscore().Key(h).Member(member).Build()).AsFloat64()
	require.NoError(t, err)
	return time.UnixMilli(int64(score))
}

// faultAcquired is what a waiter's Acquire returned, and when.
type faultAcquired struct {
	lease *batonlock.Lease
	err   error
	at    time.Time
}

// faultWaiter acquires key with l in a goroutine under ctx and returns
// once the waiter has queued (failing the test after 5s); its result
// arrives on the channel.
func faultWaiter(t *testing.T, ctx context.Context, l *batonlock.Locker, key string, ttl time.Duration) <-chan faultAcquired {
	t.Helper()
	queued := make(chan struct{})
	out := make(chan faultAcquired, 1)
	go func() {
		ls, err := l.Acquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl, OnWait: func(int) { close(queued) }})
		out <- faultAcquired{ls, err, time.Now()}
	}()
	faultWait(t, queued, 5*time.Second, "waiter queued")
	return out
}

// TestFaultHolderKilled kills a holder process with SIGKILL: no release, no
// more heartbeats. A waiter that queued behind it is granted the lock when
// the lease expires on the server, without polling: its one safety recheck
// is timed by the holder's remaining TTL, which the backend reports.
func TestFaultHolderKilled(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	const heartbeat = ttl / 3 // batonlock's default interval
	// The grant follows the server-side expiry by 1ms plus a round trip;
	// the allowance covers timer and goroutine latency of a loaded -race
	// run and the round trips of the recheck.
	const allowance = 150 * time.Millisecond

	srv := redistest.SharedServer(t)
	client := newClient(t, srv.Addr())
	prefix, key := "t"+randomHex(6), "holder-killed"
	counting := &faultCountingDriver{LockDriver: faultDriver(t, client, prefix)}
	l, err := batonlock.New(counting, nil)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"BATON_CHILD=lockholder",
		"BATON_REDIS_ADDR="+srv.Addr(),
		"BATON_PREFIX="+prefix,
		"BATON_KEY="+key,
		"BATON_TTL="+ttl.String(),
	)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr := new(faultBuffer)
	cmd.Stderr = stderr
	require.NoError(t, cmd.Start())
	var waitOnce sync.Once
	var waitErr error
	reaped := make(chan struct{})
	lines := make(chan string, 1)
	go func() {
		defer close(reaped)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	wait := func() error {
		waitOnce.Do(func() {
			<-reaped // all reads from stdout are done
			waitErr = cmd.Wait()
		})
		return waitErr
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		_ = wait()
	})

	var childFence uint64
	select {
	case line := <-lines:
		f, ok := strings.CutPrefix(line, "held ")
		require.Truef(t, ok, "child said %q; stderr:\n%s", line, stderr)
		childFence, err = strconv.ParseUint(f, 10, 64)
		require.NoError(t, err)
	case <-reaped:
		_ = wait()
		require.FailNowf(t, "child exited", "stderr:\n%s", stderr)
	case <-time.After(15 * time.Second):
		require.FailNow(t, "child did not report its lock within 15s")
	}

	killedAt := time.Now() // before the signal: the bound below is conservative
	require.NoError(t, cmd.Process.Kill())
	err = wait()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "child should die of SIGKILL")
	require.Falsef(t, exitErr.Exited(), "child exited on its own (%v); stderr:\n%s", err, stderr)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	position := 0
	lease, err := l.Acquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl, OnWait: func(p int) { position = p }})
	grantedAfter := time.Since(killedAt)
	require.NoError(t, err)
	faultReleaseLater(t, lease)

	t.Logf("child fence %d; granted fence %d %v after SIGKILL; %d LockAcquire calls",
		childFence, lease.Fence(), grantedAfter, counting.acquires.Load())
	require.Equal(t, 1, position, "the waiter queued behind the dead holder")
	require.Greater(t, lease.Fence(), childFence)
	require.LessOrEqual(t, grantedAfter, ttl+heartbeat+allowance)
	// One call to queue and one safety recheck at the holder's expiry; a
	// third only if a heartbeat the child sent just before it died reached
	// Redis after the waiter queued. A polling waiter would make dozens.
	require.LessOrEqual(t, counting.acquires.Load(), int64(3))
	require.NoError(t, lease.Release(ctx))
}

// TestFaultRedisPaused stops the server with SIGSTOP while a lease is held
// and another process's waiter is queued. The holder's heartbeat gets no
// answer, so its lease context is cancelled when its validity runs out,
// before the server would let the lease go; the waiter's deadline ends its
// Acquire.
func TestFaultRedisPaused(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	srv, client := faultServer(t)
	d := newDriver(t, client)
	l, err := batonlock.New(d, nil)
	require.NoError(t, err)
	// The waiter is another process: its own connection and driver.
	waiterClient := newClient(t, srv.Addr())
	wd, err := New(waiterClient, &Config{Prefix: d.prefix})
	require.NoError(t, err)
	t.Cleanup(wd.Close)
	wl, err := batonlock.New(wd, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Resume() }) // before the clients close
	ctx := context.Background()
	key := "paused"

	lease, err := l.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl})
	acquired := time.Now()
	require.NoError(t, err)
	faultReleaseLater(t, lease)
	ended := faultEnded(lease)
	firstUntil := lease.Until()
	serverExpiry := faultServerExpiry(t, client, d, key, lease)

	// A waiter queues behind the lease; its deadline falls while paused.
	waiterCtx, waiterCancel := context.WithTimeout(ctx, 700*time.Millisecond)
	defer waiterCancel()
	waiter := faultWaiter(t, waiterCtx, wl, key, ttl)

	require.NoError(t, srv.Pause())
	pausedAt := time.Now()
	doneAt := faultEndedAt(t, ended, 3*time.Second, "lease context cancelled")
	t.Logf("paused %v after acquire; lease done %v after acquire; server expiry %v after acquire",
		pausedAt.Sub(acquired), doneAt.Sub(acquired), serverExpiry.Sub(acquired))
	require.ErrorIs(t, context.Cause(lease.Context()), batonlock.ErrLeaseExpired)
	require.ErrorIs(t, lease.Err(), batonlock.ErrLeaseExpired)
	require.Equal(t, firstUntil, lease.Until(), "no heartbeat was confirmed: the pause came first")
	// The lease's own validity ends before the server's expiry, by its
	// safety margin (1% of TTL + 2ms) at least, and so before the acquire's
	// return + TTL; its context is cancelled when the validity ends.
	require.Truef(t, lease.Until().Before(serverExpiry), "Until %v not before server expiry %v", lease.Until(), serverExpiry)
	require.Truef(t, lease.Until().Before(acquired.Add(ttl)), "Until %v after acquire", lease.Until().Sub(acquired))
	require.Falsef(t, doneAt.Before(lease.Until()), "lease ended %v before its Until", lease.Until().Sub(doneAt))
	require.Lessf(t, doneAt.Sub(lease.Until()), faultTimerSlack, "lease ended %v after acquire", doneAt.Sub(acquired))

	// Keep the server paused until its own expiry of the lease has passed,
	// so that what it does on waking is determined: the lease is gone.
	time.Sleep(time.Until(serverExpiry.Add(50 * time.Millisecond)))
	require.NoError(t, srv.Resume())
	resumedAt := time.Now()

	// The waiter's deadline passed while paused. Acquire then gives its
	// place back, which batonlock bounds by 5s and which completes once the
	// server answers again: a context error, not a hang.
	deadline, _ := waiterCtx.Deadline()
	var r faultAcquired
	select {
	case r = <-waiter:
	case <-time.After(7 * time.Second):
		require.FailNow(t, "waiter's Acquire hangs after its deadline")
	}
	require.ErrorIs(t, r.err, context.DeadlineExceeded)
	require.Nil(t, r.lease)
	require.WithinRange(t, r.at, deadline, deadline.Add(5*time.Second+time.Second))
	t.Logf("waiter returned %v after its deadline (%v after resume)", r.at.Sub(deadline), r.at.Sub(resumedAt))

	// The server's expiry has passed. The heartbeat left in the socket
	// during the pause runs on resume, finds the lease expired and reclaims
	// it, so Release usually reports ErrNotHeld; had nothing reclaimed it,
	// Release would free it and return nil (nobody else had it). Either way
	// the lease's context ended before the server's expiry, checked above.
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	if err := lease.Release(rctx); err != nil {
		require.ErrorIs(t, err, batonlock.ErrNotHeld)
	}

	// The waiter's give-up was sent during the pause and runs on resume —
	// on this fresh server after a NOSCRIPT reply and a second send, so
	// possibly after the Release above, which then granted the slot to the
	// waiter that had not left yet. Either way the give-up frees the key
	// within a moment, with nobody queued.
	require.Eventually(t, func() bool {
		info, err := l.Inspect(rctx, key)
		return err == nil && len(info.Holders) == 0 && info.WaiterCount == 0
	}, 2*time.Second, 10*time.Millisecond, "the waiter that gave up still holds or waits")

	fresh, err := l.TryAcquire(rctx, key, &batonlock.AcquireOpts{TTL: ttl})
	require.NoError(t, err)
	faultReleaseLater(t, fresh)
	require.Greater(t, fresh.Fence(), lease.Fence())
	require.NoError(t, fresh.Release(rctx))
}

// TestFaultHolderPartitioned cuts the holder's process off from Redis (a
// proxy holds its traffic, as a network partition does) while a waiter in
// another process, on its own connection, queues behind it. The holder
// releases during the partition; its release is held past the lease's
// expiry on the server, which grants the lock to the waiter with a higher
// fence. When the partition heals, the release reaches Redis late: it is
// token-checked, so it frees nothing of the waiter's and reports
// ErrNotHeld (S9).
func TestFaultHolderPartitioned(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	srv := redistest.StartT(t, nil)
	px := faultproxy.StartT(t, srv.Addr())
	d := newDriver(t, newClient(t, px.Addr()))
	l, err := batonlock.New(d, nil)
	require.NoError(t, err)
	waiterClient := newClient(t, srv.Addr())
	wd := faultDriver(t, waiterClient, d.prefix)
	wl, err := batonlock.New(wd, nil)
	require.NoError(t, err)
	t.Cleanup(px.Heal) // before the clients close
	ctx := context.Background()
	key := "partitioned"

	lease, err := l.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl})
	require.NoError(t, err)
	serverExpiry := faultServerExpiry(t, waiterClient, d, key, lease)
	waiterCtx, waiterCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waiterCancel()
	waiter := faultWaiter(t, waiterCtx, wl, key, ttl)

	px.Partition()
	released := make(chan error, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		released <- lease.Release(rctx)
	}()

	var r faultAcquired
	select {
	case r = <-waiter:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the waiter was not granted the lock after the holder's lease expired")
	}
	require.NoError(t, r.err)
	faultReleaseLater(t, r.lease)
	require.Falsef(t, r.at.Before(serverExpiry), "granted %v before the holder's lease expired", serverExpiry.Sub(r.at))
	require.Greater(t, r.lease.Fence(), lease.Fence())
	select {
	case err := <-released:
		require.FailNowf(t, "the release returned during the partition", "err %v", err)
	default:
	}

	px.Heal()
	select {
	case err := <-released:
		require.ErrorIs(t, err, batonlock.ErrNotHeld, "the late release is token-checked")
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the held release did not return after the partition healed")
	}
	info, err := wl.Inspect(ctx, key)
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, r.lease.Token(), info.Holders[0].Token, "the waiter still holds the lock")
	require.NoError(t, r.lease.Err())
	require.NoError(t, r.lease.Release(ctx))
	t.Logf("waiter granted %v after the holder's expiry on the server", r.at.Sub(serverExpiry))
}

// TestFaultRedisRestarted kills the server, checks that every operation
// fails promptly with an error naming it and the key, and restarts it.
func TestFaultRedisRestarted(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	srv, client := faultServer(t)
	d := newDriver(t, client)
	l, err := batonlock.New(d, nil)
	require.NoError(t, err)
	ctx := context.Background()
	key, other := "restarted", "restarted-other"

	held, err := l.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl})
	require.NoError(t, err)
	acquired := time.Now()
	faultReleaseLater(t, held)
	ended := faultEnded(held)

	require.NoError(t, srv.Kill())
	killedAt := time.Now()

	ops := []struct {
		name string
		do   func(context.Context) error
	}{
		{"acquire", func(ctx context.Context) error {
			ls, err := l.TryAcquire(ctx, other, nil)
			if err == nil {
				_ = ls.Release(ctx)
			}
			return err
		}},
		{"set limit", func(ctx context.Context) error { return l.SetLimit(ctx, other, 2) }},
		{"inspect", func(ctx context.Context) error { _, err := l.Inspect(ctx, other); return err }},
	}
	for _, op := range ops {
		octx, cancel := context.WithTimeout(ctx, 2*time.Second)
		start := time.Now()
		err := op.do(octx)
		took := time.Since(start)
		cancel()
		t.Logf("%s on a dead server: %v after %v", op.name, err, took)
		require.Error(t, err, op.name)
		require.ErrorContains(t, err, op.name)
		require.ErrorContains(t, err, strconv.Quote(other))
		require.Less(t, took, 2*time.Second+500*time.Millisecond, op.name)
	}

	require.NoError(t, srv.Restart())

	// The data is gone (the test servers keep none); TryAcquire works again
	// once the client has reconnected.
	var again *batonlock.Lease
	deadline := time.Now().Add(5 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		again, err = l.TryAcquire(actx, key, &batonlock.AcquireOpts{TTL: ttl})
		cancel()
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	heldErr := held.Err()
	require.NoError(t, err, "TryAcquire after restart")
	faultReleaseLater(t, again)
	// The data is lost, the fence counter with it; the fence still rises,
	// because a fence is never below the server's time in ms times 1024.
	// Mutual exclusion does not survive the loss: the old lease is trusted
	// until its next heartbeat or its Until, whichever comes first.
	t.Logf("fence before restart %d, after restart %d; old lease when the new one was granted: %v",
		held.Fence(), again.Fence(), cmp.Or(heldErr, errors.New("still trusted")))
	require.Greater(t, again.Fence(), held.Fence(), "the fence must rise across a restart that lost the counter")

	// The lease held across the restart ends within its TTL of the kill:
	// its heartbeat either got no answer (ErrLeaseExpired) or reached the
	// restarted server, which does not know it (ErrNotHeld).
	doneAt := faultEndedAt(t, ended, 3*time.Second, "lease held across restart cancelled")
	t.Logf("lease held across restart ended %v after kill (%v after acquire): %v", doneAt.Sub(killedAt), doneAt.Sub(acquired), held.Err())
	require.Truef(t, held.Until().Before(acquired.Add(ttl)), "Until %v after acquire", held.Until().Sub(acquired))
	require.Less(t, doneAt.Sub(killedAt), ttl+faultTimerSlack)
	cause := held.Err()
	require.Truef(t, errors.Is(cause, batonlock.ErrLeaseExpired) || errors.Is(cause, batonlock.ErrNotHeld), "cause %v", cause)

	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.ErrorIs(t, faultReleaseAfterRestart(rctx, held), batonlock.ErrNotHeld)
	require.NoError(t, faultReleaseAfterRestart(rctx, again))
}

// faultReleaseAfterRestart releases ls, trying again (a few times) while
// the call fails on the way: the first command on each of the client's
// connections that the restart broke fails with EOF, and a release that
// failed may be tried again (Lease.Release).
func faultReleaseAfterRestart(ctx context.Context, ls *batonlock.Lease) error {
	var err error
	for range 5 {
		err = ls.Release(ctx)
		if err == nil || errors.Is(err, batonlock.ErrNotHeld) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// TestFaultClusterNodePaused pauses the Cluster master owning a lock's
// slot: the lease's context is cancelled before its TTL is out, while locks
// on the other masters keep working.
func TestFaultClusterNodePaused(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	cluster := redistest.StartClusterT(t)
	nodes := cluster.Nodes()
	client := newClient(t, cluster.Addrs()...)
	// One direct connection per node: a node answers EXISTS only for keys of
	// its own slots, and MOVED for the others.
	direct := make([]rueidis.Client, len(nodes))
	for i, n := range nodes {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{n.Addr()}, ForceSingleClient: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		direct[i] = c
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Resume()
		}
	})
	d := newDriver(t, client)
	l, err := batonlock.New(d, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ownerOf := func(name string) int {
		for i, c := range direct {
			n, err := c.Do(ctx, c.B().Exists().Key(name).Build()).AsInt64()
			if err == nil && n == 1 {
				return i
			}
		}
		return -1
	}

	// A key on another master, found before the pause: the ":c" key a
	// lock leaves behind shows where it lives.
	other := ""
	for i := range 20 {
		key := fmt.Sprintf("cluster-other-%d", i)
		ls, err := l.TryAcquire(ctx, key, nil)
		require.NoError(t, err)
		require.NoError(t, ls.Release(ctx))
		if ownerOf(d.lockKeys(key).keys[4]) != ownerOf(d.lockKeys("cluster-paused").keys[4]) {
			other = key
			break
		}
	}

	key := "cluster-paused"
	lease, err := l.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: ttl})
	acquired := time.Now()
	require.NoError(t, err)
	faultReleaseLater(t, lease)
	ended := faultEnded(lease)
	owner := ownerOf(d.lockKeys(key).keys[0])
	require.NotEqual(t, -1, owner, "no node owns the lock's keys")
	require.NotEmpty(t, other, "no key found on another master")

	require.NoError(t, nodes[owner].Pause())
	doneAt := faultEndedAt(t, ended, 3*time.Second, "lease context cancelled")
	t.Logf("node %s paused; lease ended %v after acquire: %v", nodes[owner].Addr(), doneAt.Sub(acquired), lease.Err())
	require.ErrorIs(t, lease.Err(), batonlock.ErrLeaseExpired)
	require.Truef(t, lease.Until().Before(acquired.Add(ttl)), "Until %v after acquire", lease.Until().Sub(acquired))
	require.Lessf(t, doneAt.Sub(lease.Until()), faultTimerSlack, "lease ended %v after acquire", doneAt.Sub(acquired))

	// The other masters serve their keys meanwhile.
	octx, ocancel := context.WithTimeout(ctx, 2*time.Second)
	ols, err := l.TryAcquire(octx, other, nil)
	require.NoError(t, err, "a key on another master")
	require.NoError(t, ols.Release(octx))
	ocancel()

	require.NoError(t, nodes[owner].Resume())
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	// Resumed this soon after the lease's validity ended, the server may
	// still list it (and the heartbeat queued in the socket may extend it
	// once the node wakes): Release then frees it and returns nil. Resumed
	// after the server's expiry, Release returns ErrNotHeld.
	if err := lease.Release(rctx); err != nil {
		require.ErrorIs(t, err, batonlock.ErrNotHeld)
	}
	info, err := l.Inspect(rctx, key)
	require.NoError(t, err)
	require.Empty(t, info.Holders)
}

package batonredis

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/faultproxy"
	"github.com/batonhq/baton/internal/lockcheck"
	"github.com/batonhq/baton/internal/redistest"
)

// The lock network fault tests: lockers, each on its own connections
// through its own fault proxy, take mutexes and semaphores of 3 while a
// chaos loop cuts their connections and partitions them, for longer than
// their leases, and the history is checked (internal/lockcheck, with
// Options.Faults): a holder holds from its grant until it releases or its
// lease stops being trusted, whichever is first (Event.Lost: its Context
// ended, or Lease.Err reports the expiry once Until passed), and no key
// ever has more such holders than its limit; fences rise in grant order;
// waiters are served first come, first served; the grants and ends of
// holds are linearizable as a semaphore whose holders may be dropped once
// their hold ended; and no call hangs past its deadline or fails without
// saying what failed. The Broken tests run the same through faults with a
// holder that ignores its lease and with a driver that hides a failed
// heartbeat, and require that the checks catch them.

func init() { children["lockfaulter"] = runLockFaulter }

// lockFaultTTL is the leases' TTL: partitions of up to lockFaultPartition
// outlast it, so holders with long holds lose leases.
const (
	lockFaultTTL       = 400 * time.Millisecond
	lockFaultPartition = 2500 * time.Millisecond
	lockFaultWait      = 2 * time.Second
)

// lockFaultConfig is the Locker of every locker in these tests: quiet, for
// heartbeats fail all the time.
var lockFaultConfig = &batonlock.Config{Logger: slog.New(slog.DiscardHandler)}

// lockFaultWorkload is the workload of each locker: most holds short, a
// fifth up to 1s (longer than a lease's TTL), Acquires waiting up to 2s.
func lockFaultWorkload(proc int, seed uint64, d time.Duration) lockcheck.Workload {
	return lockcheck.Workload{
		Proc: proc, Keys: contentionKeys, Goroutines: 8, Duration: d,
		MaxOps: max(400, int(d/time.Second)*200), Seed: seed, TTL: lockFaultTTL,
		MaxHold: 5 * time.Millisecond, LongHoldPercent: 20, MaxLongHold: time.Second,
		MaxWait: lockFaultWait, Faults: true,
	}
}

// runLockFaulter is a child process of TestLockNetworkFaults; it reaches
// Redis through the proxy the test gives it.
func runLockFaulter() int {
	return runWorkloadChild("lockfaulter", lockFaultWorkload, lockFaultConfig, nil)
}

// lockFaultPrompt is how late a call or release may return after its
// deadline: the 100ms an Acquire may wait for its give-up, and room for a
// loaded machine, where whole processes have been seen to stall for more
// than 500ms under -race (every goroutine's call returning late at one
// instant, faults or none). A call that waits out a partition (up to
// lockFaultPartition) instead of its deadline goes past it.
const lockFaultPrompt = 1500 * time.Millisecond

// lockChaos cuts (if cuts) or partitions one of its proxies at random
// every 20 to 100ms, a partition lasting from minPartition to
// lockFaultPartition, until stopped.
// The proxy of process i is proxies[i]; each partition is recorded as an
// isolation of its process.
type lockChaos struct {
	proxies    []*faultproxy.Proxy
	stop, done chan struct{}
	cuts       int
	isolations []lockcheck.Isolation
}

func startLockChaos(proxies []*faultproxy.Proxy, seed uint64, cuts bool, minPartition time.Duration) *lockChaos {
	c := &lockChaos{proxies: proxies, stop: make(chan struct{}), done: make(chan struct{})}
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	pause := func(d time.Duration) bool {
		select {
		case <-c.stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	go func() {
		defer close(c.done)
		for pause(time.Duration(20+rng.IntN(80)) * time.Millisecond) {
			proc := rng.IntN(len(proxies))
			px := proxies[proc]
			if cuts && rng.IntN(2) == 0 {
				px.Cut()
				c.cuts++
				continue
			}
			is := lockcheck.Isolation{Proc: proc, From: lockcheck.Now()}
			px.Partition()
			pause(minPartition + time.Duration(rng.Int64N(int64(lockFaultPartition-minPartition))))
			px.Heal()
			is.To = lockcheck.Now()
			c.isolations = append(c.isolations, is)
		}
	}()
	return c
}

// Stop ends the chaos, heals every proxy and returns the options to check
// the history with.
func (c *lockChaos) Stop() *lockcheck.Options {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
	for _, px := range c.proxies {
		px.Heal()
	}
	return &lockcheck.Options{Faults: true, Prompt: lockFaultPrompt, Isolations: c.isolations}
}

func (c *lockChaos) String() string {
	return fmt.Sprintf("%d cuts and %d partitions of %d proxies", c.cuts, len(c.isolations), len(c.proxies))
}

// lockFaultLockers returns n Lockers on prefix, each on its own client
// through its own proxy to addr, wrapped by wrap if not nil.
func lockFaultLockers(t *testing.T, addr, prefix string, n int, wrap func(batondriver.LockDriver) batondriver.LockDriver) ([]*batonlock.Locker, []*faultproxy.Proxy) {
	t.Helper()
	var (
		lockers []*batonlock.Locker
		proxies []*faultproxy.Proxy
	)
	for range n {
		px := faultproxy.StartT(t, addr)
		d := faultDriver(t, newClient(t, px.Addr()), prefix)
		t.Cleanup(px.Heal) // before the client closes
		var ld batondriver.LockDriver = d
		if wrap != nil {
			ld = wrap(d)
		}
		l, err := batonlock.New(ld, lockFaultConfig)
		require.NoError(t, err)
		lockers = append(lockers, l)
		proxies = append(proxies, px)
	}
	return lockers, proxies
}

// lockFaultsDrained waits until no key of keys (named by prefix n) has a
// holder or a waiter, as seen without a proxy: leases that lost their
// release run out, places whose give-up was lost expire (WaitTTL).
func lockFaultsDrained(t *testing.T, l *batonlock.Locker, keys []lockcheck.Key) {
	t.Helper()
	var busy []string
	require.Eventually(t, func() bool {
		busy = busy[:0]
		for _, k := range keys {
			info, err := l.Inspect(t.Context(), k.Name)
			if err != nil {
				busy = append(busy, err.Error())
			} else if len(info.Holders)+info.WaiterCount > 0 {
				busy = append(busy, fmt.Sprintf("%s: %d holders, %d waiters", k.Name, len(info.Holders), info.WaiterCount))
			}
		}
		return len(busy) == 0
	}, 15*time.Second, 20*time.Millisecond, "keys still busy: %v", busy)
}

// TestLockNetworkFaults: four lockers — two child processes and two
// clients of the test's own process, 32 goroutines — each through its own
// fault proxy, contend on two mutexes and two semaphores of 3 while one
// proxy at a time is cut or partitioned for up to 2.5s (leases last 400ms).
// The merged history must pass every check of lockcheck with
// Options.Faults, show holders hit (leases lost, found gone by their
// release, or releases cut off) and calls failed, and leave no key held or waited for.
//
// It was shown to fail, each time in two runs of two, by one-off edits of
// batonlock (reverted): a lease trusted until 100ms past the backend's
// expiry instead of a margin before it (lease.go: Until) failed overlap
// and linearizability, or linearizability alone; an Acquire that waits
// for its give-up as long as WaitTTL instead of 100ms (locker.go:
// giveBack) failed the prompt check, returning up to 795ms after its
// deadline. TestBrokenLockHolderIgnoresLoss and
// TestBrokenLockHeartbeatHidden keep such proofs as tests.
//
// BATON_LOCKFAULT_DURATION (a Go duration, default 4s) lengthens the run
// (make chaos: 60s).
func TestLockNetworkFaults(t *testing.T) {
	t.Parallel()
	dur := envDuration(t, "BATON_LOCKFAULT_DURATION", 4*time.Second)
	srv, prefix, seed, ctx := startLockRun(t, dur)

	lockers, proxies := lockFaultLockers(t, srv.Addr(), prefix, 2, nil)
	var kids []*contenderProc
	for proc := 2; proc < 4; proc++ {
		px := faultproxy.StartT(t, srv.Addr())
		t.Cleanup(px.Heal)
		proxies = append(proxies, px)
		kids = append(kids, startContender(ctx, t, "lockfaulter", proc, px.Addr(), prefix, seed, dur))
	}
	chaos := startLockChaos(proxies, seed, true, 100*time.Millisecond)
	defer chaos.Stop() // if the test fails first
	for _, c := range kids {
		_, err := io.WriteString(c.stdin, "go\n")
		require.NoError(t, err)
		_ = c.stdin.Close()
	}
	h := contentionRun(t, lockers, lockFaultWorkload(0, seed, dur))
	logs := make([]string, len(kids))
	for i, c := range kids {
		c.wait(t)
		logs[i] = c.log
	}
	opts := chaos.Stop()
	t.Logf("through %v", chaos)
	kh, err := lockcheck.ReadFiles(logs...)
	require.NoError(t, err)
	h = append(h, kh...)
	// A fault must have hit a holder: its lease lost, found gone by its
	// release, or the release cut off. (Since a grant that arrives late is
	// confirmed before it is handed out, leases are no longer lost on
	// arrival, which most of the losses were: a short run may have none
	// lost outright.)
	historyCheck(t, h, opts, func(s lockcheck.Summary) bool {
		return s.Procs == 4 && s.Grants >= 100 && s.Queued > 0 && s.Lost+s.NotHeld+s.ReleaseFailed > 0 && s.Errors+s.TimedOut > 0
	})

	direct, err := batonlock.New(faultDriver(t, newClient(t, srv.Addr()), prefix), nil)
	require.NoError(t, err)
	lockFaultsDrained(t, direct, contentionKeys)
}

// lockFaultMustCatch runs rounds of w on lockers through faults of
// proxies until the checks report a violation, and fails the test if none
// is found within 30s. Its faults are long partitions only (1.5s and
// more, a lease's TTL several times over): a cut breaks the calls in
// flight, which a broken lease would hide for a moment at most.
func lockFaultMustCatch(t *testing.T, lockers []*batonlock.Locker, proxies []*faultproxy.Proxy, w lockcheck.Workload) {
	t.Helper()
	contentionMustCatchWithin(t, 30*time.Second, func(n int) ([]lockcheck.Event, *lockcheck.Options) {
		w := w
		w.Seed = uint64(n)
		w.Keys = []lockcheck.Key{
			{Name: fmt.Sprintf("r%d-mutex", n), Limit: 1},
			{Name: fmt.Sprintf("r%d-sem", n), Limit: 3},
		}
		chaos := startLockChaos(proxies, uint64(n), false, 1500*time.Millisecond)
		h := contentionRun(t, lockers, w)
		opts := chaos.Stop()
		opts.LinearizabilityTimeout = 5 * time.Second
		return h, opts
	})
}

// lockFaultBrokenWorkload is a round of a Broken test: long holds, as long
// as partitions, so that partitions cost leases that their holders go on
// using.
func lockFaultBrokenWorkload() lockcheck.Workload {
	w := lockFaultWorkload(0, 0, 3*time.Second)
	w.Goroutines, w.LongHoldPercent, w.MaxLongHold = 6, 100, lockFaultPartition
	return w
}

// TestBrokenLockHolderIgnoresLoss: holders that do not watch their
// lease's Context hold their whole time through faults, past the loss of
// their lease, while the backend has given the slot to another. The
// overlap check catches them.
func TestBrokenLockHolderIgnoresLoss(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	lockers, proxies := lockFaultLockers(t, srv.Addr(), "t"+randomHex(6), 3, nil)
	w := lockFaultBrokenWorkload()
	w.IgnoreLoss = true
	lockFaultMustCatch(t, lockers, proxies, w)
}

// heartbeatHidingDriver is a broken driver: an extension reports the lease
// extended at once and goes to the backend in the background, its result
// dropped. A lease whose extensions fail (no answer through a partition, a
// cut connection, "not held") goes on being trusted while the backend lets
// it expire and grants its slot again.
type heartbeatHidingDriver struct {
	batondriver.LockDriver
}

func (d heartbeatHidingDriver) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	go func() { // BROKEN: the result is dropped
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = d.LockDriver.LockExtend(ctx, p)
	}()
	return &batondriver.LockExtendResult{Extended: true, Now: time.Now()}, nil
}

// TestBrokenLockHeartbeatHidden: the heartbeat's failures are hidden by
// the driver (heartbeatHidingDriver), so holders partitioned past their
// TTL keep trusting leases the backend has given to others. The checks
// catch it (overlap and linearizability).
func TestBrokenLockHeartbeatHidden(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	wrap := func(d batondriver.LockDriver) batondriver.LockDriver { return heartbeatHidingDriver{d} }
	lockers, proxies := lockFaultLockers(t, srv.Addr(), "t"+randomHex(6), 3, wrap)
	lockFaultMustCatch(t, lockers, proxies, lockFaultBrokenWorkload())
}

// contextIgnoringDriver is a broken driver: its acquire calls ignore their
// context, so one caught by a partition waits for the partition to heal
// instead of returning at its deadline.
type contextIgnoringDriver struct {
	batondriver.LockDriver
}

func (d contextIgnoringDriver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	return d.LockDriver.LockAcquire(context.WithoutCancel(ctx), p) // BROKEN
}

// TestBrokenLockCallIgnoresDeadline: acquire calls that outlast their
// deadline through a partition (contextIgnoringDriver) are caught by the
// prompt check.
func TestBrokenLockCallIgnoresDeadline(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	wrap := func(d batondriver.LockDriver) batondriver.LockDriver { return contextIgnoringDriver{d} }
	lockers, proxies := lockFaultLockers(t, srv.Addr(), "t"+randomHex(6), 3, wrap)
	w := lockFaultBrokenWorkload()
	w.MaxWait = 600 * time.Millisecond // deadlines that fall in partitions
	lockFaultMustCatch(t, lockers, proxies, w)
}

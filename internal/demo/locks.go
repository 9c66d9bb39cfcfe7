package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batonlock"
)

// LocksConfig scales the lock demonstration. The zero value is the full
// demonstration.
type LocksConfig struct {
	// Users is the number of users whose syncs contend for per-user locks.
	// Default 5.
	Users int
	// Webhooks is the number of webhook deliveries for one customer. Default 60.
	Webhooks int
	// Section is how long a webhook delivery holds its slot. Default 20ms.
	Section time.Duration
}

// RunLocks runs the demonstration of standalone locks (package batonlock)
// on driver, narrating to out: twins dropping out, slots waited for in
// order, a halted and resumed key, a crashed holder and a fencing token. It
// returns an error naming every guarantee that did not hold.
func RunLocks(ctx context.Context, driver batondriver.LockDriver, out io.Writer, cfg *LocksConfig) error {
	if cfg == nil {
		cfg = &LocksConfig{}
	}
	c := *cfg
	if c.Users == 0 {
		c.Users = 5
	}
	if c.Webhooks == 0 {
		c.Webhooks = 60
	}
	if c.Section == 0 {
		c.Section = 20 * time.Millisecond
	}
	locker, err := batonlock.New(driver, &batonlock.Config{TTL: 2 * time.Second})
	if err != nil {
		return err
	}
	d := &lockDemo{locker: locker, out: out, cfg: c, run: fmt.Sprintf("%d", time.Now().UnixNano())}
	for _, part := range []func(context.Context) error{d.perUser, d.webhooks, d.crash, d.fencing} {
		if err := part(ctx); err != nil {
			d.fail(err)
		}
	}
	fmt.Fprintln(out)
	if len(d.failures) > 0 {
		fmt.Fprintf(out, "FAILED: %d guarantee(s) did not hold\n", len(d.failures))
		return errors.Join(d.failures...)
	}
	fmt.Fprintln(out, "All guarantees held.")
	return nil
}

type lockDemo struct {
	locker   *batonlock.Locker
	out      io.Writer
	cfg      LocksConfig
	run      string // makes keys unique per run, for shared backends
	mu       sync.Mutex
	failures []error
}

func (d *lockDemo) key(s string) string { return "demo:" + d.run + ":" + s }

func (d *lockDemo) printf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, format, args...)
}

func (d *lockDemo) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failures = append(d.failures, err)
	fmt.Fprintf(d.out, "  ✗ %v\n", err)
}

func (d *lockDemo) check(ok bool, format string, args ...any) {
	if ok {
		d.printf("  ✓ "+format+"\n", args...)
		return
	}
	d.fail(fmt.Errorf(format, args...))
}

// perUser: four twins of a sync job per user start at once; one per user
// runs, the others drop out at once (seed S1), and users run in parallel.
func (d *lockDemo) perUser(ctx context.Context) error {
	d.printf("1. One sync per user at a time: %d users, 4 twins each, started together (TryDo)\n", d.cfg.Users)
	const twins = 4
	var (
		ran, dropped atomic.Int32
		running      atomic.Int32
		maxRunning   atomic.Int32
		perUser      = make([]atomic.Int32, d.cfg.Users)
		start        = make(chan struct{})
		wg           sync.WaitGroup
	)
	errs := make(chan error, d.cfg.Users*twins)
	for u := range d.cfg.Users {
		for twin := range twins {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := d.locker.TryDo(ctx, d.key(fmt.Sprintf("sync:user:%d", u)), nil, func(ctx context.Context, lease *batonlock.Lease) error {
					n := running.Add(1)
					for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
					}
					perUser[u].Add(1)
					d.printf("   user %d twin %d: running with fence %d\n", u, twin, lease.Fence())
					time.Sleep(200 * time.Millisecond) // twins start while this runs
					running.Add(-1)
					return nil
				})
				if err != nil {
					errs <- err
					return
				}
				if ok {
					ran.Add(1)
				} else {
					dropped.Add(1)
				}
			}()
		}
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	for u := range d.cfg.Users {
		d.check(perUser[u].Load() == 1, "user %d: exactly one sync ran (got %d)", u, perUser[u].Load())
	}
	d.check(dropped.Load() == int32(d.cfg.Users*(twins-1)), "%d twins dropped at once, none ran twice", dropped.Load())
	d.check(maxRunning.Load() > 1, "different users ran in parallel (up to %d at once)", maxRunning.Load())
	return nil
}

// webhooks: deliveries for one customer share 3 slots and wait their turn in
// order (seed S11/S12); midway the key is halted, then raised to 5 (S14).
func (d *lockDemo) webhooks(ctx context.Context) error {
	key := d.key("webhooks:customer:42")
	d.printf("\n2. At most 3 webhooks at once for customer 42: %d deliveries of %v, waiting in line (Do)\n", d.cfg.Webhooks, d.cfg.Section)
	var (
		mu       sync.Mutex
		running  int
		peak     = map[int]int{} // limit in force -> peak concurrency seen
		limit    = 3
		halted   bool
		fences   = map[int]uint64{} // delivery -> fence of its grant
		violated []string
		queued   = make([]int, 0, d.cfg.Webhooks) // deliveries in the order they queued
		wg       sync.WaitGroup
	)
	opts := func(i int) *batonlock.AcquireOpts {
		return &batonlock.AcquireOpts{Limit: 3, OnWait: func(int) {
			mu.Lock()
			queued = append(queued, i)
			mu.Unlock()
		}}
	}
	for i := range d.cfg.Webhooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := d.locker.Do(ctx, key, opts(i), func(ctx context.Context, lease *batonlock.Lease) error {
				mu.Lock()
				running++
				if halted {
					violated = append(violated, fmt.Sprintf("delivery %d started while halted", i))
				}
				if running > limit {
					violated = append(violated, fmt.Sprintf("%d running with limit %d", running, limit))
				}
				peak[limit] = max(peak[limit], running)
				fences[i] = lease.Fence()
				mu.Unlock()
				time.Sleep(d.cfg.Section)
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			})
			if err != nil {
				d.fail(fmt.Errorf("delivery %d: %w", i, err))
			}
		}()
		time.Sleep(time.Millisecond) // arrive in order
	}

	// Halt the key a third of the way through, then resume at 5 slots.
	time.Sleep(time.Duration(d.cfg.Webhooks/9) * d.cfg.Section)
	mu.Lock()
	limit = 3 // holders already running may finish
	mu.Unlock()
	if err := d.locker.SetLimit(ctx, key, 0); err != nil {
		return err
	}
	info, err := d.locker.Inspect(ctx, key)
	if err != nil {
		return err
	}
	d.printf("   halted (limit 0): %d still running, %d parked\n", len(info.Holders), info.WaiterCount)
	time.Sleep(2 * d.cfg.Section) // running deliveries finish
	mu.Lock()
	halted = true
	mu.Unlock()
	time.Sleep(3 * d.cfg.Section)
	info, err = d.locker.Inspect(ctx, key)
	if err != nil {
		return err
	}
	d.printf("   while halted: %d running, %d parked\n", len(info.Holders), info.WaiterCount)
	waiting := info.WaiterCount // all run at once on resume, up to 5
	mu.Lock()
	halted, limit = false, 5
	mu.Unlock()
	if err := d.locker.SetLimit(ctx, key, 5); err != nil {
		return err
	}
	d.printf("   resumed with limit 5\n")
	wg.Wait()

	d.check(len(fences) == d.cfg.Webhooks, "all %d deliveries ran", len(fences))
	d.check(len(violated) == 0, "never over the limit, nothing started while halted (%d violations) %s", len(violated), strings.Join(violated, "; "))
	d.check(peak[3] == 3 && peak[5] == min(5, waiting), "peak concurrency %d with limit 3, %d with limit 5 (%d waited for the resume)",
		peak[3], peak[5], waiting)
	all := slices.Sorted(maps.Values(fences))
	d.check(len(all) > 0 && !hasDup(all), "every grant had its own fence (%d..%d)", all[0], all[len(all)-1])
	d.check(fifo(queued, fences), "the %d deliveries that waited were granted first come, first served (their fences increase in queue order)", len(queued))
	return nil
}

// crash: a holder that dies without releasing keeps its slot only until its
// lease runs out; the waiter behind it is then granted (S5, S15).
func (d *lockDemo) crash(ctx context.Context) error {
	key := d.key("report:nightly")
	d.printf("\n3. A holder crashes without releasing (no heartbeat, TTL 300ms)\n")
	dead, err := d.locker.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: 300 * time.Millisecond, NoHeartbeat: true})
	if err != nil {
		return err
	}
	start := time.Now()
	next, err := d.locker.Acquire(ctx, key, nil)
	if err != nil {
		return err
	}
	waited := time.Since(start)
	d.printf("   waiter granted after %v with fence %d (crashed holder had %d)\n", waited.Round(time.Millisecond), next.Fence(), dead.Fence())
	d.check(waited < time.Second && next.Fence() > dead.Fence(), "the crashed holder's slot came back within its TTL")
	d.check(dead.Err() != nil, "the crashed holder's own context had ended: %v", dead.Err())
	return next.Release(ctx)
}

// fencing: a paused holder acts late; its fence gives it away.
func (d *lockDemo) fencing(ctx context.Context) error {
	key := d.key("ledger")
	d.printf("\n4. Fencing: a holder pauses past its lease, then tries to write\n")
	slow, err := d.locker.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: 100 * time.Millisecond, NoHeartbeat: true})
	if err != nil {
		return err
	}
	<-slow.Done()
	fast, err := d.locker.Acquire(ctx, key, nil)
	if err != nil {
		return err
	}
	defer fast.Release(ctx)
	var highest uint64
	write := func(fence uint64) bool {
		if fence < highest {
			return false
		}
		highest = fence
		return true
	}
	d.printf("   new holder writes with fence %d: accepted=%v\n", fast.Fence(), write(fast.Fence()))
	late := write(slow.Fence())
	d.printf("   paused holder writes with fence %d: accepted=%v\n", slow.Fence(), late)
	d.check(!late, "the late write was refused by its fence")
	return nil
}

func hasDup(s []uint64) bool {
	for i := 1; i < len(s); i++ {
		if s[i] == s[i-1] {
			return true
		}
	}
	return false
}

// fifo reports whether the deliveries that queued were granted in the order
// they queued: their fences increase in that order.
func fifo(queued []int, fences map[int]uint64) bool {
	for i := 1; i < len(queued); i++ {
		if fences[queued[i]] <= fences[queued[i-1]] {
			return false
		}
	}
	return true
}

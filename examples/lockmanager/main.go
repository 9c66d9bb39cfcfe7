// Lockmanager mirrors seed S8 (lock-manager-redlock): Baton's standalone
// lock API, package batonlock, used outside any job. It shows
//
//   - the non-blocking lock: TryDo tries once and tells whether the block
//     ran, with the block's result (the seed's Result#run? and #result);
//   - the blocking lock: Do waits its turn, first come first served, woken
//     the moment the holder releases, and a context deadline bounds the
//     wait (the seed's LockNotAcquired after the timeout);
//   - a holder that crashed without releasing: its lease expires on its own
//     and the next caller gets the lock, with a higher fencing token.
//
// Two Lockers play this process and another one; on Redis each has its own
// connection. The program runs on the in-memory backend, or on Redis with
// --redis URL, and exits 1 if anything it checks did not hold:
//
//	go run ./examples/lockmanager [--redis redis://127.0.0.1:6379/0]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/examples/internal/exampleenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout))
}

// key is the lock the two lockers share: one daily report at a time.
const key = "example:lockmanager:daily-report"

// run plays the scenario and returns the exit code: 0 if every check held,
// 1 if one failed or the backend could not be used, 2 for bad flags.
func run(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("lockmanager", flag.ContinueOnError)
	fs.SetOutput(out)
	redisURL := fs.String("redis", "", "Redis URL (redis://host:port/db); default: the in-memory backend")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mine, theirs, closeAll, err := openLockers(*redisURL)
	if err != nil {
		fmt.Fprintln(out, "lockmanager:", err)
		return 1
	}
	defer closeAll()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &exampleenv.Checks{Out: out}

	fmt.Fprintln(out, "Non-blocking: TryDo tries once and says whether the block ran.")
	var total int // the block's result
	ran, err := mine.TryDo(ctx, key, nil, func(ctx context.Context, lease *batonlock.Lease) error {
		total = 1234 // compute the report
		return nil
	})
	fmt.Fprintf(out, "  key free:             ran=%v result=%d err=%v\n", ran, total, err)
	c.Check(ran && total == 1234 && err == nil, "the block ran and its result came back")

	held, err := theirs.TryAcquire(ctx, key, nil)
	if err != nil {
		fmt.Fprintln(out, "lockmanager: the other process could not take the lock:", err)
		return 1
	}
	total = 0
	began := time.Now()
	ran, err = mine.TryDo(ctx, key, nil, func(ctx context.Context, lease *batonlock.Lease) error {
		total = 1234
		return nil
	})
	fmt.Fprintf(out, "  held by another:      ran=%v result=%d err=%v, answered in %v\n", ran, total, err, since(began))
	c.Check(!ran && total == 0 && err == nil, "the block did not run, and TryDo did not wait")

	ran, err = mine.TryDo(ctx, "example:lockmanager:upstream", nil, func(ctx context.Context, lease *batonlock.Lease) error {
		return errors.New("upstream answered 503")
	})
	fmt.Fprintf(out, "  block fails:          ran=%v err=%v\n", ran, err)
	c.Check(ran && err != nil, "the block's error is returned")

	fmt.Fprintln(out, "\nBlocking: Do waits until the lock is free, bounded by a timeout.")
	releasing := make(chan time.Time, 1)
	go func() {
		time.Sleep(200 * time.Millisecond)
		releasing <- time.Now()
		_ = held.Release(context.WithoutCancel(ctx)) // hands the lock to the waiter in the same step
	}()
	waitCtx, cancelWait := context.WithTimeout(ctx, 2*time.Second)
	began = time.Now()
	var ranAt time.Time
	err = mine.Do(waitCtx, key, nil, func(ctx context.Context, lease *batonlock.Lease) error {
		ranAt = time.Now()
		return nil
	})
	cancelWait()
	releaseBegan := <-releasing
	fmt.Fprintf(out, "  holder releases after 200ms, timeout 2s: err=%v, waited %v\n", err, since(began))
	c.Check(err == nil && !ranAt.IsZero() && !ranAt.Before(releaseBegan), "the block ran once the holder released, not before")

	held, err = theirs.TryAcquire(ctx, key, nil)
	if err != nil {
		fmt.Fprintln(out, "lockmanager: the other process could not take the lock:", err)
		return 1
	}
	waitCtx, cancelWait = context.WithTimeout(ctx, 200*time.Millisecond)
	began = time.Now()
	ranAt = time.Time{}
	err = mine.Do(waitCtx, key, nil, func(ctx context.Context, lease *batonlock.Lease) error {
		ranAt = time.Now()
		return nil
	})
	cancelWait()
	fmt.Fprintf(out, "  holder keeps it, timeout 200ms:         err=%v, gave up after %v\n", err, since(began))
	c.Check(errors.Is(err, context.DeadlineExceeded) && ranAt.IsZero(), "the wait ended at the timeout and the block did not run")
	_ = held.Release(ctx)

	fmt.Fprintln(out, "\nA holder that crashes never releases; its lease expires on its own.")
	// NoHeartbeat stands for the dead process: nothing extends the lease.
	crashed, err := theirs.TryAcquire(ctx, key, &batonlock.AcquireOpts{TTL: 300 * time.Millisecond, NoHeartbeat: true})
	if err != nil {
		fmt.Fprintln(out, "lockmanager: the other process could not take the lock:", err)
		return 1
	}
	waitCtx, cancelWait = context.WithTimeout(ctx, 2*time.Second)
	began = time.Now()
	var fence uint64
	ranAt = time.Time{}
	err = mine.Do(waitCtx, key, nil, func(ctx context.Context, lease *batonlock.Lease) error {
		ranAt, fence = time.Now(), lease.Fence()
		return nil
	})
	cancelWait()
	// Until is when the crashed holder's lease is known to have been held
	// up to, on this clock: the backend's expiry less a safety margin.
	fmt.Fprintf(out, "  TTL 300ms: err=%v, waited %v; fence %d after the crashed holder's %d\n", err, since(began), fence, crashed.Fence())
	c.Check(err == nil && !ranAt.Before(crashed.Until()) && fence > crashed.Fence(),
		fmt.Sprintf("the lock was taken over only once the TTL ran out (%v after the crashed holder's lease was last known held), with a higher fence", ranAt.Sub(crashed.Until()).Round(100*time.Microsecond)))

	return c.Result()
}

// openLockers returns two lockers on one backend — this process and
// another one — and a function that closes their connections.
func openLockers(redisURL string) (mine, theirs *batonlock.Locker, closeAll func(), err error) {
	var drivers [2]batondriver.LockDriver
	var closers []func()
	closeAll = func() {
		for _, c := range closers {
			c()
		}
	}
	if redisURL == "" {
		mem := batonmem.New()
		drivers = [2]batondriver.LockDriver{mem, mem}
	} else {
		opt, err := rueidis.ParseURL(redisURL)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("bad --redis URL %q: %w", redisURL, err)
		}
		for i := range drivers {
			client, err := rueidis.NewClient(opt)
			if err != nil {
				closeAll()
				return nil, nil, nil, fmt.Errorf("cannot reach Redis at %s: %w", redisURL, err)
			}
			d, err := batonredis.New(client, nil)
			if err != nil {
				client.Close()
				closeAll()
				return nil, nil, nil, err
			}
			drivers[i] = d
			closers = append(closers, func() { d.Close(); client.Close() })
		}
	}
	var lockers [2]*batonlock.Locker
	for i, d := range drivers {
		if lockers[i], err = batonlock.New(d, nil); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
	}
	return lockers[0], lockers[1], closeAll, nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Microsecond) }

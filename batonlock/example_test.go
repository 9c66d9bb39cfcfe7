package batonlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
)

// Seed S1 and S8: run a block under a per-user lock if nobody else is
// running it, and find out whether it ran.
func ExampleLocker_TryDo() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx := context.Background()

	sync := func(user int) {
		ran, err := locker.TryDo(ctx, fmt.Sprintf("sync:user:%d", user), nil, func(ctx context.Context, lease *batonlock.Lease) error {
			fmt.Printf("syncing user %d\n", user)
			// A twin for the same user exits at once.
			twinRan, _ := locker.TryDo(ctx, fmt.Sprintf("sync:user:%d", user), nil, func(context.Context, *batonlock.Lease) error { return nil })
			fmt.Printf("twin for user %d ran: %v\n", user, twinRan)
			return nil
		})
		fmt.Printf("user %d ran: %v, err: %v\n", user, ran, err)
	}
	sync(1)
	sync(2)
	// Output:
	// syncing user 1
	// twin for user 1 ran: false
	// user 1 ran: true, err: <nil>
	// syncing user 2
	// twin for user 2 ran: false
	// user 2 ran: true, err: <nil>
}

// Do waits its turn, first come first served, bounded by the context.
func ExampleLocker_Do() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := locker.Do(ctx, "ledger", nil, func(ctx context.Context, lease *batonlock.Lease) error {
				mu.Lock() // not needed for safety here; the race detector asks for it
				total++
				mu.Unlock()
				return nil
			})
			if err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println("total:", total)
	// Output: total: 10
}

// A semaphore: at most 3 deliveries at once per customer (seed S11); a
// fourth waits its turn and runs as soon as a slot frees.
func Example_semaphore() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx := context.Background()
	opts := &batonlock.AcquireOpts{Limit: 3}

	var held []*batonlock.Lease
	for range 3 {
		lease, _ := locker.TryAcquire(ctx, "webhooks:customer:7", opts)
		held = append(held, lease)
	}
	fourth, queued := make(chan *batonlock.Lease), make(chan struct{})
	go func() {
		lease, _ := locker.Acquire(ctx, "webhooks:customer:7", &batonlock.AcquireOpts{
			Limit: 3,
			OnWait: func(pos int) {
				fmt.Println("fourth waits at position", pos)
				close(queued)
			},
		})
		fourth <- lease
	}()
	<-queued
	_ = held[0].Release(ctx) // hands the slot to the fourth in the same step
	lease := <-fourth
	fmt.Println("fourth runs with a fence above the first three:", lease.Fence() > held[2].Fence())
	for _, l := range append(held[1:], lease) {
		_ = l.Release(ctx)
	}
	// Output:
	// fourth waits at position 1
	// fourth runs with a fence above the first three: true
}

// A semaphore's limit is changed at runtime for every process sharing the
// backend; 0 halts the key.
func ExampleLocker_SetLimit() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx := context.Background()
	opts := &batonlock.AcquireOpts{Limit: 3}

	var held []*batonlock.Lease
	for {
		lease, err := locker.TryAcquire(ctx, "webhooks:customer:42", opts)
		if errors.Is(err, batonlock.ErrNotAcquired) {
			break
		}
		held = append(held, lease)
	}
	fmt.Println("running:", len(held))

	_ = locker.SetLimit(ctx, "webhooks:customer:42", 4)
	extra, err := locker.TryAcquire(ctx, "webhooks:customer:42", opts)
	fmt.Println("after raising the limit:", err == nil)
	held = append(held, extra)

	_ = locker.SetLimit(ctx, "webhooks:customer:42", 0) // halt
	_ = held[0].Release(ctx)
	_, err = locker.TryAcquire(ctx, "webhooks:customer:42", opts)
	fmt.Println("while halted:", err)

	info, _ := locker.Inspect(ctx, "webhooks:customer:42")
	fmt.Printf("limit %d (override %v), holders %d\n", info.Limit, info.Override, len(info.Holders))
	for _, lease := range held[1:] {
		_ = lease.Release(ctx)
	}
	// Output:
	// running: 3
	// after raising the limit: true
	// while halted: batonlock: not acquired
	// limit 0 (override true), holders 3
}

// fencedStore is a resource that refuses writes from stale lease holders:
// it remembers the highest fence it has seen.
type fencedStore struct {
	mu      sync.Mutex
	highest uint64
	value   string
}

func (s *fencedStore) Write(fence uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		return fmt.Errorf("stale fence %d < %d", fence, s.highest)
	}
	s.highest, s.value = fence, value
	return nil
}

// Fencing: a holder that stalled past its lease writes with an old fence,
// and the resource refuses it.
func ExampleLease_Fence() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx := context.Background()
	store := &fencedStore{}

	// A holder takes the lock, then stalls (a GC pause, a slow disk) without a heartbeat.
	slow, _ := locker.TryAcquire(ctx, "report", &batonlock.AcquireOpts{TTL: 50 * time.Millisecond, NoHeartbeat: true})
	<-slow.Done() // its lease ran out
	time.Sleep(10 * time.Millisecond)

	// Another holder takes over and writes.
	fast, _ := locker.TryAcquire(ctx, "report", nil)
	fmt.Println(store.Write(fast.Fence(), "fresh"))

	// The stalled holder wakes up and tries to write: refused.
	fmt.Println(store.Write(slow.Fence(), "stale"))
	fmt.Println("value:", store.value)
	_ = fast.Release(ctx)
	// Output:
	// <nil>
	// stale fence 1 < 2
	// value: fresh
}

// Acquire waits its turn, as long as its context allows: with a deadline,
// a caller that finds the lock held gives up when the deadline passes,
// with the context's error, and leaves the queue of waiters.
func ExampleLocker_Acquire() {
	locker, _ := batonlock.New(batonmem.New(), nil)
	ctx := context.Background()
	holder, _ := locker.TryAcquire(ctx, "report", nil) // held, say by another process

	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	lease, err := locker.Acquire(waitCtx, "report", nil)
	fmt.Println("gave up:", lease == nil, errors.Is(err, context.DeadlineExceeded))
	info, _ := locker.Inspect(ctx, "report")
	fmt.Printf("%d holding, %d waiting\n", len(info.Holders), info.WaiterCount)

	_ = holder.Release(ctx)
	lease, err = locker.Acquire(ctx, "report", nil) // free now: granted at once
	fmt.Println("after the release:", err, lease.Fence() > holder.Fence())
	_ = lease.Release(ctx)
	// Output:
	// gave up: true true
	// 1 holding, 0 waiting
	// after the release: <nil> true
}

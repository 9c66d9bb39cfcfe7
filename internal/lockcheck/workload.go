package lockcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batonhq/baton/batonlock"
)

// errTimeout is Event.Err of an Acquire that gave up when its context ended.
const errTimeout = "timeout"

// Key is a key a Workload contends on, with the limit every caller gives.
type Key struct {
	Name  string
	Limit int
}

// Workload contends on keys from many goroutines of one process, each
// repeating at random: Acquire with a timeout or TryAcquire, hold for a
// while, release. Every operation is recorded as one Event. A holder holds
// until its time is up or its lease's Context ends, whichever is first,
// and records the loss of its lease (Event.Lost).
type Workload struct {
	// Proc is recorded as Event.Proc.
	Proc int
	// Keys are the keys to contend on, each picked uniformly. Required.
	Keys []Key
	// Goroutines is how many goroutines contend. Default 16.
	Goroutines int
	// Duration is how long goroutines start new operations. Default 1s.
	Duration time.Duration
	// MaxOps bounds each goroutine's operations. Default 1000.
	MaxOps int
	// Seed seeds the goroutines' choices (each goroutine's stream depends
	// on Seed, Proc and its number).
	Seed uint64
	// TryPercent is the share of TryAcquire among operations. Default 30;
	// negative means none.
	TryPercent int
	// MaxHold bounds how long a granted slot is held, uniformly from 0.
	// Default 3ms.
	MaxHold time.Duration
	// MaxPause bounds the pause after each operation, uniformly from 0.
	// Default 1ms.
	MaxPause time.Duration
	// MaxWait bounds how long an Acquire waits before giving up; each picks
	// uniformly between MaxWait/10 and MaxWait. Default 300ms.
	MaxWait time.Duration
	// TTL is the lease TTL. Without Faults it must far exceed MaxHold: the
	// checkers assume then that leases end only by release. Default 10s.
	TTL time.Duration

	// LongHoldPercent is the share of holds drawn up to MaxLongHold
	// instead of MaxHold: with Faults, holds long enough for a fault to
	// cost the lease. Default none.
	LongHoldPercent int
	MaxLongHold     time.Duration
	// Faults runs the workload through injected faults: every call and
	// release gets a deadline (an Acquire its wait, others MaxWait), and
	// calls that fail are recorded (Event.Err) but not returned by Run.
	Faults bool
	// IgnoreLoss makes every holder a broken one, for showing that the
	// checkers catch it: it holds for its whole time whatever becomes of
	// its lease, and records no loss.
	IgnoreLoss bool
	// Progress, if set, is called with an operation's event so far when
	// its slot is granted and again just before its release is called, so
	// that a process killed while it holds a slot leaves a record of the
	// hold (see KilledProcess).
	Progress func(Event)
}

func (w Workload) withDefaults() Workload {
	if w.Goroutines == 0 {
		w.Goroutines = 16
	}
	if w.Duration == 0 {
		w.Duration = time.Second
	}
	if w.MaxOps == 0 {
		w.MaxOps = 1000
	}
	if w.TryPercent == 0 {
		w.TryPercent = 30
	}
	if w.MaxHold == 0 {
		w.MaxHold = 3 * time.Millisecond
	}
	if w.MaxPause == 0 {
		w.MaxPause = time.Millisecond
	}
	if w.MaxWait == 0 {
		w.MaxWait = 300 * time.Millisecond
	}
	if w.TTL == 0 {
		w.TTL = 10 * time.Second
	}
	return w
}

// Run runs the workload on l until Duration has passed, every goroutine has
// made MaxOps operations, or ctx ends, and records every operation to rec.
// It returns an error if an operation failed for a reason other than the
// workload's own timeouts and "not acquired" (the events record it too).
func (w Workload) Run(ctx context.Context, l *batonlock.Locker, rec *Recorder) error {
	if len(w.Keys) == 0 {
		return errors.New("lockcheck: workload without keys")
	}
	w = w.withDefaults()
	deadline := time.Now().Add(w.Duration)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for g := range w.Goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(w.Seed, uint64(w.Proc)<<32|uint64(g)))
			for i := 0; i < w.MaxOps && ctx.Err() == nil && time.Now().Before(deadline); i++ {
				e := w.op(ctx, l, g, rng)
				rec.Record(e)
				if e.Err != "" && e.Err != errTimeout && !w.Faults {
					mu.Lock()
					errs = append(errs, fmt.Errorf("lockcheck: p%d/g%d %s %q: %s", e.Proc, e.G, e.Kind, e.Key, e.Err))
					mu.Unlock()
				}
				time.Sleep(randDuration(rng, w.MaxPause))
			}
		})
	}
	wg.Wait()
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("lockcheck: and %d more errors", len(errs)-3))
	}
	return errors.Join(errs...)
}

// op makes one operation and returns its event.
func (w *Workload) op(ctx context.Context, l *batonlock.Locker, g int, rng *rand.Rand) Event {
	k := w.Keys[rng.IntN(len(w.Keys))]
	e := Event{Proc: w.Proc, G: g, Key: k.Name, Limit: k.Limit, Kind: Acquire}
	opts := &batonlock.AcquireOpts{Limit: k.Limit, TTL: w.TTL}
	var (
		lease *batonlock.Lease
		err   error
	)
	if rng.IntN(100) < w.TryPercent {
		e.Kind = TryAcquire
		tctx, cancel := ctx, context.CancelFunc(func() {})
		if w.Faults {
			tctx, cancel = context.WithTimeout(ctx, w.MaxWait)
			e.Deadline = deadline(tctx)
		}
		e.Call = Now()
		lease, err = l.TryAcquire(tctx, k.Name, opts)
		e.Return = Now()
		cancel()
	} else {
		// OnWait runs in Acquire's goroutine, after the call that queued
		// this caller returned.
		opts.OnWait = func(int) { e.Queued = Now() }
		wait := w.MaxWait/10 + randDuration(rng, w.MaxWait-w.MaxWait/10)
		actx, cancel := context.WithTimeout(ctx, wait)
		e.Deadline = deadline(actx)
		e.Call = Now()
		lease, err = l.Acquire(actx, k.Name, opts)
		e.Return = Now()
		cancel()
	}
	switch {
	case err == nil:
	case errors.Is(err, batonlock.ErrNotAcquired):
		return e
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		e.Err = errTimeout
		return e
	default:
		e.Err = err.Error()
		return e
	}
	e.OK, e.Fence = true, lease.Fence()
	if w.Progress != nil {
		w.Progress(e)
	}
	hold := w.MaxHold
	if rng.IntN(100) < w.LongHoldPercent {
		hold = w.MaxLongHold
	}
	hold = randDuration(rng, hold)
	if w.IgnoreLoss {
		time.Sleep(hold)
	} else {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-lease.Done():
			t.Stop()
		}
		e.Lost = lostAt(lease)
	}

	releaseWait := 5 * time.Second
	if w.Faults {
		releaseWait = w.MaxWait
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseWait)
	defer cancel()
	e.ReleaseDeadline = deadline(rctx)
	e.ReleaseCall = Now()
	if w.Progress != nil {
		p := e
		p.Release, p.ReleaseReturn = ReleaseFailed, e.ReleaseCall // outcome unknown until it returns
		w.Progress(p)
	}
	err = lease.Release(rctx)
	e.ReleaseReturn = Now()
	switch {
	case err == nil:
		e.Release = Released
	case errors.Is(err, batonlock.ErrNotHeld):
		e.Release = NotHeld
	default:
		e.Release = ReleaseFailed
	}
	return e
}

// deadline returns ctx's deadline as a Now value, 0 if it has none.
func deadline(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return Now() + int64(time.Until(d))
}

// lostAt returns when lease's holder stopped trusting it, as Event.Lost
// records it: zero while it is trusted, else the earlier of now and its
// Until (the moment Lease.Err, which reads the clock, reports the expiry).
func lostAt(lease *batonlock.Lease) int64 {
	if lease.Err() == nil {
		return 0
	}
	now := Now()
	// Until is on this process's monotonic clock: map it onto Now's.
	until := now - int64(time.Since(lease.Until()))
	return min(now, until)
}

func randDuration(rng *rand.Rand, upTo time.Duration) time.Duration {
	if upTo <= 0 {
		return 0
	}
	return time.Duration(rng.Int64N(int64(upTo) + 1))
}

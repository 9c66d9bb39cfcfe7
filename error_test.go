package baton_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
)

// outcomeCases are handler returns and what OutcomeOf makes of them.
var outcomeCases = []struct {
	name    string
	err     error
	outcome baton.JobOutcome
	delay   time.Duration
}{
	{"nil", nil, baton.JobOutcomeCompleted, 0},
	{"snooze", baton.JobSnooze(time.Minute), baton.JobOutcomeSnooze, time.Minute},
	{"negative snooze", baton.JobSnooze(-time.Minute), baton.JobOutcomeSnooze, 0},
	{"wrapped snooze", fmt.Errorf("later: %w", baton.JobSnooze(time.Second)), baton.JobOutcomeSnooze, time.Second},
	{"again", baton.JobAgain(), baton.JobOutcomeAgain, 0},
	{"again in", baton.JobAgainIn(time.Hour), baton.JobOutcomeAgain, time.Hour},
	{"cancel", baton.JobCancel(errors.New("bad input")), baton.JobOutcomeCancel, 0},
	{"cancel nil", baton.JobCancel(nil), baton.JobOutcomeCancel, 0},
	// errors.As looks for a snooze before a cancel: the snooze inside wins.
	{"cancel of a snooze", baton.JobCancel(baton.JobSnooze(time.Second)), baton.JobOutcomeSnooze, time.Second},
	{"failure", errors.New("upstream timeout"), baton.JobOutcomeRetry, 0},
	// A panic's value steers nothing: a PanicError does not unwrap to it.
	{"panic of a snooze", &baton.PanicError{Value: baton.JobSnooze(time.Second)}, baton.JobOutcomeRetry, 0},
	{"deadline", context.DeadlineExceeded, baton.JobOutcomeRetry, 0},
}

func TestOutcomeOf(t *testing.T) {
	t.Parallel()
	for _, tc := range outcomeCases {
		outcome, delay := baton.OutcomeOf(tc.err)
		require.Equal(t, tc.outcome, outcome, tc.name)
		require.Equal(t, tc.delay, delay, tc.name)
	}
}

type outcomeArgs struct {
	Case int `json:"case"`
}

func (outcomeArgs) Kind() string { return "outcome" }

// A running client records, for each handler return, the outcome OutcomeOf
// names.
func TestOutcomeOfIsWhatTheWorkerRecords(t *testing.T) {
	events := make(chan *baton.JobEvent, 2*len(outcomeCases))
	var ran sync.Map // job ID -> true once its handler ran
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[outcomeArgs](func(_ context.Context, job *baton.Job[outcomeArgs]) error {
		if _, again := ran.LoadOrStore(job.ID, true); again {
			return nil // a rerun: only the first is compared
		}
		return outcomeCases[job.Args.Case].err
	}), &baton.WorkerOpts{Backoff: func(int) time.Duration { return time.Hour }})
	c, _ := setup(t, nil, &baton.Config{Workers: workers, OnJobEnd: func(ev *baton.JobEvent) {
		select {
		case events <- ev:
		default: // reruns past the buffer are not compared
		}
	}})
	start(t, c)
	ids := map[string]int{}
	for i := range outcomeCases {
		res, err := c.Insert(t.Context(), outcomeArgs{Case: i}, nil)
		require.NoError(t, err)
		ids[res.Job.ID] = i
	}
	seen := map[int]bool{}
	for len(seen) < len(outcomeCases) {
		select {
		case ev := <-events:
			i, ok := ids[ev.ID]
			if !ok || seen[i] {
				continue // a rerun
			}
			seen[i] = true
			want, _ := baton.OutcomeOf(outcomeCases[i].err)
			require.Equal(t, want, ev.Outcome, outcomeCases[i].name)
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of %d outcomes reported", len(seen), len(outcomeCases))
		}
	}
}

// A PanicError's text says what panicked, and leaves the stack out.
func TestPanicErrorText(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("tenant 7: %w", &baton.PanicError{Value: "boom", Stack: []byte("goroutine 1 [running]:")})
	require.EqualError(t, err, "tenant 7: panic: boom")
	var p *baton.PanicError
	require.ErrorAs(t, err, &p)
	require.Equal(t, "boom", p.Value)
}

// DefaultBackoff doubles from 1s, stops doubling at 24h, and jitters each
// delay within ±25% of its base, both ways; attempts below 1 count as 1
// and a huge attempt does not overflow.
func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	const samples = 200
	for attempt := -1; attempt <= 40; attempt++ {
		base := time.Second << max(attempt-1, 0)
		if attempt > 18 || base > 24*time.Hour {
			base = 24 * time.Hour
		}
		var below, above bool
		for range samples {
			d := baton.DefaultBackoff(attempt)
			require.GreaterOrEqual(t, d, base*3/4, "attempt %d", attempt)
			require.LessOrEqual(t, d, base*5/4, "attempt %d", attempt)
			below, above = below || d < base, above || d > base
		}
		require.True(t, below && above, "attempt %d: the jitter goes both ways", attempt)
	}
	d := baton.DefaultBackoff(1 << 30)
	require.GreaterOrEqual(t, d, 18*time.Hour)
	require.LessOrEqual(t, d, 30*time.Hour)
}

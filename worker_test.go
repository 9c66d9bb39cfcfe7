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

// A kind's middleware wrap its attempts alone, inside the client's, the
// first listed outermost, within the kind's timeout; the client's see
// what they return.
func TestKindMiddleware(t *testing.T) {
	var mu sync.Mutex
	var trail []string
	note := func(s string) {
		mu.Lock()
		trail = append(trail, s)
		mu.Unlock()
	}
	mw := func(name string) baton.WorkerMiddleware {
		return func(ctx context.Context, job *baton.JobRow, next func(context.Context) error) error {
			_, deadline := ctx.Deadline()
			note(fmt.Sprintf("%s %s deadline=%v", name, job.Kind, deadline))
			err := next(ctx)
			note(fmt.Sprintf("%s saw %v", name, err))
			return err
		}
	}
	giveUp := func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
		if err := next(ctx); err != nil {
			return baton.JobCancel(err)
		}
		return nil
	}
	events := make(chan *baton.JobEvent, 2)
	workers := baton.NewWorkers()
	kindMWs := []baton.WorkerMiddleware{mw("kind-outer"), giveUp, mw("kind-inner")}
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error {
		note("email handler")
		return errors.New("mailbox full")
	}), &baton.WorkerOpts{Timeout: -1, Middleware: kindMWs})
	kindMWs[0] = mw("changed after AddWorker") // AddWorker keeps its own copy
	baton.AddWorker(workers, baton.WorkFunc[otherArgs](func(context.Context, *baton.Job[otherArgs]) error {
		note("other handler")
		return nil
	}), &baton.WorkerOpts{Timeout: time.Hour})
	c, _ := setup(t, nil, &baton.Config{
		Workers:          workers,
		WorkerMiddleware: []baton.WorkerMiddleware{mw("client")},
		OnJobEnd:         hear(events),
	})
	start(t, c)
	ctx := t.Context()

	res, err := c.Insert(ctx, emailArgs{To: "a"}, nil)
	require.NoError(t, err)
	row := waitState(t, c, "default", res.Job.ID, baton.JobStateCancelled)
	require.Equal(t, baton.JobOutcomeCancel, nextEvent(t, events).Outcome)
	require.Equal(t, "baton: job cancelled: mailbox full", row.Errors[0].Error)
	_, err = c.Insert(ctx, otherArgs{}, nil)
	require.NoError(t, err)
	require.Equal(t, baton.JobOutcomeCompleted, nextEvent(t, events).Outcome)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{
		"client email deadline=false",
		"kind-outer email deadline=false",
		"kind-inner email deadline=false",
		"email handler",
		"kind-inner saw mailbox full",
		"kind-outer saw baton: job cancelled: mailbox full",
		"client saw baton: job cancelled: mailbox full",
		"client other deadline=true", // the other kind: the client's alone
		"other handler",
		"client saw <nil>",
	}, trail)
}

// A panic in a kind's middleware is the attempt's *PanicError, and the job
// is retried, as for one in the client's.
func TestKindMiddlewarePanic(t *testing.T) {
	var calls int
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil }),
		&baton.WorkerOpts{Middleware: []baton.WorkerMiddleware{func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error {
			if calls++; calls == 1 {
				panic("kind middleware boom")
			}
			return next(ctx)
		}}})
	events := make(chan *baton.JobEvent, 2)
	c, _ := setup(t, nil, &baton.Config{
		Workers:  workers,
		Backoff:  func(int) time.Duration { return time.Millisecond },
		OnJobEnd: hear(events),
	})
	start(t, c)
	res, err := c.Insert(t.Context(), emailArgs{}, nil)
	require.NoError(t, err)
	waitState(t, c, "default", res.Job.ID, baton.JobStateCompleted)
	ev := nextEvent(t, events)
	require.Equal(t, baton.JobOutcomeRetry, ev.Outcome)
	var p *baton.PanicError
	require.ErrorAs(t, ev.Err, &p)
	require.Equal(t, "kind middleware boom", p.Value)
	require.Equal(t, baton.JobOutcomeCompleted, nextEvent(t, events).Outcome)
}

func TestAddWorkerRefusesNilMiddleware(t *testing.T) {
	t.Parallel()
	fn := baton.WorkFunc[emailArgs](func(context.Context, *baton.Job[emailArgs]) error { return nil })
	ok := func(ctx context.Context, _ *baton.JobRow, next func(context.Context) error) error { return next(ctx) }
	err := baton.AddWorkerSafely(baton.NewWorkers(), fn, &baton.WorkerOpts{Middleware: []baton.WorkerMiddleware{ok, nil}})
	require.EqualError(t, err, `baton: AddWorker "email": WorkerOpts: Middleware[1] is nil`)
}

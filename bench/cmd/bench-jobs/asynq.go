package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/bench/internal/cmdcount"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynqDB is the Redis database of every asynq cell. asynq has no key
// prefix (its keys are asynq:{queue}:... and a few global asynq:... keys),
// so its cells use a database of their own, 1, while Baton's use 0; within
// it each cell has a queue of its own, whose keys are deleted after it.
const asynqDB = 1

// asynqSide is the asynq end of one cell: a Client, and for cells that run
// jobs a Server, each on its own default go-redis client (commands
// counted), working one queue of the cell's own.
type asynqSide struct {
	queue string
	sent  atomic.Int64
	cc    *redis.Client
	c     *asynq.Client
	sc    *redis.Client
	srv   *asynq.Server
	ic    *redis.Client // the Inspector's, not counted
	insp  *asynq.Inspector
}

// newAsynqSide makes an asynq cell on queue. With concurrency > 0 it also
// makes a Server (not started) with that concurrency and taskCheck as its
// TaskCheckInterval (0: asynq's default, 1s); everything else is asynq's
// default. Its logs below error level are dropped.
func newAsynqSide(addr, queue string, concurrency int, taskCheck time.Duration) *asynqSide {
	a := &asynqSide{queue: queue}
	a.cc = cmdcount.NewGoRedis(addr, asynqDB, &a.sent)
	a.c = asynq.NewClientFromRedisClient(a.cc)
	a.ic = cmdcount.NewGoRedis(addr, asynqDB, nil)
	a.insp = asynq.NewInspectorFromRedisClient(a.ic)
	if concurrency > 0 {
		a.sc = cmdcount.NewGoRedis(addr, asynqDB, &a.sent)
		a.srv = asynq.NewServerFromRedisClient(a.sc, asynq.Config{
			Concurrency:       concurrency,
			Queues:            map[string]int{queue: 1},
			TaskCheckInterval: taskCheck,
			Logger:            quietAsynq{},
			LogLevel:          asynq.ErrorLevel,
		})
	}
	return a
}

// shutdown stops the server, if started. It can take asynq's
// TaskCheckInterval (up to 1.5s): a processor that found its queues empty
// sleeps that long before it looks at its done channel.
func (a *asynqSide) shutdown() {
	if a.srv != nil {
		a.srv.Shutdown()
	}
}

func (a *asynqSide) close() {
	a.c.Close()
	a.insp.Close()
	a.cc.Close()
	a.ic.Close()
	if a.sc != nil {
		a.sc.Close()
	}
}

// keys is the pattern of the cell's queue's keys.
func (a *asynqSide) keys() string { return "asynq:{" + a.queue + "}:*" }

// enqueue enqueues one task of index i, its payload JSON as Baton's args.
func (a *asynqSide) enqueue(ctx context.Context, i int) error {
	payload, err := json.Marshal(benchArgs{I: i})
	if err != nil {
		return err
	}
	_, err = a.c.EnqueueContext(ctx, asynq.NewTask("bench", payload), asynq.Queue(a.queue))
	return err
}

// backlog enqueues n tasks from 16 goroutines: asynq has no batch enqueue.
func (a *asynqSide) backlog(ctx context.Context, n int) error {
	const g = 16
	var (
		wg    sync.WaitGroup
		first loadgen.FirstError
		next  atomic.Int64
	)
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := a.enqueue(ctx, i); err != nil {
					first.Set(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if first.Err != nil {
		return first.Err
	}
	info, err := a.insp.GetQueueInfo(a.queue)
	if err != nil {
		return err
	}
	if info.Pending != n {
		return fmt.Errorf("backlog: %d tasks pending, want %d", info.Pending, n)
	}
	return nil
}

// quietAsynq drops asynq's logs below error level and prints the others to
// stderr.
type quietAsynq struct{}

func (quietAsynq) Debug(...any) {}
func (quietAsynq) Info(...any)  {}
func (quietAsynq) Warn(...any)  {}
func (quietAsynq) Error(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"asynq error:"}, args...)...)
}
func (quietAsynq) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"asynq fatal:"}, args...)...)
	os.Exit(1)
}

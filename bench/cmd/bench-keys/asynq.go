package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/bench/internal/cmdcount"
	"github.com/batonhq/baton/bench/internal/loadgen"
)

// asynqDB is the Redis database of every asynq cell. asynq has no key
// prefix (its keys are asynq:{queue}:... and a few global asynq:... keys),
// so its cells use a database of their own, 1, while Baton's use 0; within
// it each cell has a queue and a lock key of its own, deleted after it.
const asynqDB = 1

// asynqSide is the asynq end of one cell: a Client and a Server, each on
// its own default go-redis client, and a redislock client on a third, all
// three with their commands counted in sent.
type asynqSide struct {
	queue  string
	sent   atomic.Int64
	cc     *redis.Client
	c      *asynq.Client
	sc     *redis.Client
	srv    *asynq.Server
	lc     *redis.Client
	locker *redislock.Client
	ic     *redis.Client // the Inspector's, not counted
	insp   *asynq.Inspector
}

// newAsynqSide makes an asynq cell on queue with the given server config;
// its Queues and logger are set here. Its logs below error level are
// dropped.
func newAsynqSide(addr, queue string, cfg asynq.Config) *asynqSide {
	a := &asynqSide{queue: queue}
	a.cc = cmdcount.NewGoRedis(addr, asynqDB, &a.sent)
	a.c = asynq.NewClientFromRedisClient(a.cc)
	a.ic = cmdcount.NewGoRedis(addr, asynqDB, nil)
	a.insp = asynq.NewInspectorFromRedisClient(a.ic)
	a.lc = cmdcount.NewGoRedis(addr, asynqDB, &a.sent)
	a.locker = redislock.New(a.lc)
	a.sc = cmdcount.NewGoRedis(addr, asynqDB, &a.sent)
	cfg.Queues = map[string]int{queue: 1}
	cfg.Logger = quietAsynq{}
	cfg.LogLevel = asynq.ErrorLevel
	a.srv = asynq.NewServerFromRedisClient(a.sc, cfg)
	return a
}

func (a *asynqSide) close() {
	a.c.Close()
	a.insp.Close()
	a.cc.Close()
	a.ic.Close()
	a.lc.Close()
	a.sc.Close()
}

// keys is the pattern of the cell's queue's keys.
func (a *asynqSide) keys() string { return "asynq:{" + a.queue + "}:*" }

// lockKey is the redislock key of the cell's one customer.
func (a *asynqSide) lockKey() string { return "bench-keys:lock:" + a.queue }

// backlog enqueues n tasks of customer 42 from 16 goroutines (asynq has no
// batch enqueue), each with opts.
func (a *asynqSide) backlog(ctx context.Context, n int, opts ...asynq.Option) error {
	const g = 16
	var (
		wg    sync.WaitGroup
		first loadgen.FirstError
		next  atomic.Int64
	)
	opts = append([]asynq.Option{asynq.Queue(a.queue)}, opts...)
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				payload, err := json.Marshal(keyArgs{I: i, Customer: 42})
				if err == nil {
					_, err = a.c.EnqueueContext(ctx, asynq.NewTask("bench", payload), opts...)
				}
				if err != nil {
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

// countingRetry is redislock's LinearBackoff that counts how often it was
// asked: once after every failed try.
type countingRetry struct {
	every time.Duration
	n     *atomic.Int64
}

func (r countingRetry) NextBackoff() time.Duration {
	r.n.Add(1)
	return r.every
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

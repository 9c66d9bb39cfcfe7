package main

import (
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/hibiken/asynq"

	"github.com/batonhq/baton/bench/internal/jobcell"
)

// asynqSide is the asynq end of one cell (package jobcell), with a Server
// and a redislock client, the lock's go-redis client counted too.
type asynqSide struct {
	*jobcell.Asynq
	locker *redislock.Client
}

// newAsynqSide makes an asynq cell on queue with the given server config;
// package jobcell sets its Queues and its logger.
func newAsynqSide(addr, queue string, cfg asynq.Config) *asynqSide {
	a := &asynqSide{Asynq: jobcell.NewAsynq(addr, queue)}
	a.locker = redislock.New(a.Redis())
	a.NewServer(cfg)
	return a
}

// lockKey is the redislock key of the cell's one customer.
func (a *asynqSide) lockKey() string { return "bench-keys:lock:" + a.Queue }

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

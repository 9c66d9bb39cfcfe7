package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Client-side command counts, as in bench-locks (whose package main cannot
// be imported): Redis 7.0 counts every redis.call a script runs in INFO
// stats total_commands_processed, so only the clients can tell how many
// commands they sent. An EVALSHA is one, its EVAL fallback another, a
// pipeline of n is n. Commands a client library sends on its own to set up
// a connection (HELLO, CLIENT TRACKING, SELECT, ...) are not counted.

// countingClient counts the commands issued through a rueidis client.
type countingClient struct {
	rueidis.Client
	n *atomic.Int64
}

func (c countingClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c countingClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

func (c countingClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.n.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

func (c countingClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.n.Add(int64(len(multi)))
	return c.Client.DoMultiCache(ctx, multi...)
}

func (c countingClient) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	c.n.Add(1)
	return c.Client.Receive(ctx, subscribe, fn)
}

// countHook counts the commands issued through a go-redis client.
type countHook struct{ n *atomic.Int64 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// newGoRedis returns a go-redis client on database db with default options,
// whose commands add to n (nil: not counted).
func newGoRedis(addr string, db int, n *atomic.Int64) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	if n != nil {
		rc.AddHook(countHook{n})
	}
	return rc
}

// newRueidis returns a rueidis client with default options whose commands
// add to n.
func newRueidis(addr string, n *atomic.Int64) (rueidis.Client, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
	if err != nil {
		return nil, err
	}
	return countingClient{Client: c, n: n}, nil
}

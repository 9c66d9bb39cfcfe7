// Package cmdcount counts, on the client side, the commands the benchmark
// commands' Redis clients issue.
//
// Redis 7.0 counts the commands a Lua script runs with redis.call in INFO
// stats total_commands_processed as well as in INFO commandstats (one EVAL
// running four redis.call adds five to both). Neither tells how many
// commands a client sent, so the clients count them here, as they are
// issued: an EVALSHA and its EVAL fallback count two, a pipeline of n
// counts n. Commands a client library sends on its own to set up a
// connection (HELLO, CLIENT TRACKING, SELECT, ...) are not counted.
package cmdcount

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Rueidis counts the commands issued through a rueidis client in N.
type Rueidis struct {
	rueidis.Client
	// N is the counter the commands add to.
	N *atomic.Int64
}

// Do counts one command and issues it.
func (c Rueidis) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.N.Add(1)
	return c.Client.Do(ctx, cmd)
}

// DoMulti counts len(multi) commands and issues them.
func (c Rueidis) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	c.N.Add(int64(len(multi)))
	return c.Client.DoMulti(ctx, multi...)
}

// DoCache counts one command and issues it.
func (c Rueidis) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	c.N.Add(1)
	return c.Client.DoCache(ctx, cmd, ttl)
}

// DoMultiCache counts len(multi) commands and issues them.
func (c Rueidis) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	c.N.Add(int64(len(multi)))
	return c.Client.DoMultiCache(ctx, multi...)
}

// Receive counts one command and issues it.
func (c Rueidis) Receive(ctx context.Context, subscribe rueidis.Completed, fn func(msg rueidis.PubSubMessage)) error {
	c.N.Add(1)
	return c.Client.Receive(ctx, subscribe, fn)
}

// Hook is a go-redis hook that counts the commands issued through a
// go-redis client in N.
type Hook struct {
	// N is the counter the commands add to.
	N *atomic.Int64
}

// DialHook returns next unchanged: dialling sends no command.
func (h Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command.
func (h Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts every command of a pipeline.
func (h Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.N.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// NewGoRedis returns a go-redis client on database db with default options,
// whose commands add to n (nil: not counted).
func NewGoRedis(addr string, db int, n *atomic.Int64) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	if n != nil {
		rc.AddHook(Hook{N: n})
	}
	return rc
}

// NewRueidis returns a rueidis client with default options whose commands
// add to n.
func NewRueidis(addr string, n *atomic.Int64) (rueidis.Client, error) {
	return NewRueidisOptions(rueidis.ClientOption{InitAddress: []string{addr}}, n)
}

// NewRueidisOptions returns a rueidis client with options o whose commands
// add to n.
func NewRueidisOptions(o rueidis.ClientOption, n *atomic.Int64) (rueidis.Client, error) {
	c, err := rueidis.NewClient(o)
	if err != nil {
		return nil, err
	}
	return Rueidis{Client: c, N: n}, nil
}

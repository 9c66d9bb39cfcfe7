package jobcell

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/bench/internal/cmdcount"
	"github.com/batonhq/baton/bench/internal/loadgen"
)

// AsynqDB is the Redis database of every asynq cell. asynq has no key
// prefix (its keys are asynq:{queue}:... and a few global asynq:... keys),
// so its cells use a database of their own, 1, while Baton's use 0; within
// it each cell has a queue of its own, whose keys are deleted after it.
const AsynqDB = 1

// Asynq is the asynq end of one cell, working a queue of the cell's own: a
// Client, an Inspector and, once NewServer has made it, a Server, each on
// its own default go-redis client. The commands of the Client's and the
// Server's clients are counted in Sent; the Inspector's are not.
type Asynq struct {
	// Queue is the cell's queue.
	Queue string
	// Sent counts the commands of the cell's measured clients.
	Sent atomic.Int64
	// Client enqueues the cell's tasks.
	Client *asynq.Client
	// Inspector checks the queue, outside what is measured.
	Inspector *asynq.Inspector
	// Server works the queue; nil until NewServer.
	Server *asynq.Server

	addr string
	rcs  []*redis.Client // every go-redis client of the cell, closed by Close
}

// NewAsynq makes an asynq cell on queue of the server at addr, with a
// Client and an Inspector.
func NewAsynq(addr, queue string) *Asynq {
	a := &Asynq{Queue: queue, addr: addr}
	a.Client = asynq.NewClientFromRedisClient(a.Redis())
	ic := cmdcount.NewGoRedis(addr, AsynqDB, nil)
	a.rcs = append(a.rcs, ic)
	a.Inspector = asynq.NewInspectorFromRedisClient(ic)
	return a
}

// Redis returns a new default go-redis client on AsynqDB whose commands
// are counted in Sent; Close closes it.
func (a *Asynq) Redis() *redis.Client {
	rc := cmdcount.NewGoRedis(a.addr, AsynqDB, &a.Sent)
	a.rcs = append(a.rcs, rc)
	return rc
}

// NewServer makes the cell's Server, not started, with cfg: its Queues
// are set to the cell's queue alone, and its logs below error level are
// dropped; everything else is as cfg says (zero: asynq's default).
func (a *Asynq) NewServer(cfg asynq.Config) {
	cfg.Queues = map[string]int{a.Queue: 1}
	cfg.Logger = quietAsynq{}
	cfg.LogLevel = asynq.ErrorLevel
	a.Server = asynq.NewServerFromRedisClient(a.Redis(), cfg)
}

// Shutdown stops the Server, if there is one. It can take asynq's
// TaskCheckInterval (up to 1.5s): a processor that found its queues empty
// sleeps that long before it looks at its done channel.
func (a *Asynq) Shutdown() {
	if a.Server != nil {
		a.Server.Shutdown()
	}
}

// Close closes the Client, the Inspector and every go-redis client of the
// cell.
func (a *Asynq) Close() {
	a.Client.Close()
	a.Inspector.Close()
	for _, rc := range a.rcs {
		rc.Close()
	}
}

// Keys is the pattern of the cell's queue's keys.
func (a *Asynq) Keys() string { return "asynq:{" + a.Queue + "}:*" }

// Enqueue enqueues one task of type "bench" on the cell's queue, its
// payload args as JSON, with opts.
func (a *Asynq) Enqueue(ctx context.Context, args any, opts ...asynq.Option) error {
	payload, err := json.Marshal(args)
	if err != nil {
		return err
	}
	_, err = a.Client.EnqueueContext(ctx, asynq.NewTask("bench", payload), append([]asynq.Option{asynq.Queue(a.Queue)}, opts...)...)
	return err
}

// Backlog enqueues n tasks from 16 goroutines (asynq has no batch
// enqueue), task i's payload args(i), each with opts, and checks that n
// are pending.
func (a *Asynq) Backlog(ctx context.Context, n int, args func(i int) any, opts ...asynq.Option) error {
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
				if err := a.Enqueue(ctx, args(i), opts...); err != nil {
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
	info, err := a.Inspector.GetQueueInfo(a.Queue)
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

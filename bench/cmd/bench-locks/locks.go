package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batondriver/batonredis"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/bench/internal/cmdcount"
)

// Every implementation is driven through the same two function shapes, so
// the load loops in load.go know nothing of any library.

// errBusy is what a try returns when the key is held: an expected outcome,
// not a failure.
var errBusy = errors.New("busy")

// unlockFunc gives back what a lockFunc took.
type unlockFunc func(ctx context.Context) error

// lockFunc takes key, either with one attempt (returning errBusy when it is
// held) or waiting for it, depending on which field of impl it sits in.
type lockFunc func(ctx context.Context, key string) (unlockFunc, error)

// impl is one lock implementation with its own clients.
type impl struct {
	name  string
	try   lockFunc // one attempt; nil if the row has none
	wait  lockFunc // blocking acquire; nil if the row has none
	close func()
	// sent counts the commands the implementation's clients issued (see
	// package cmdcount); it stays 0 for in-memory implementations.
	sent atomic.Int64
}

// ttl is the lease of every Redis lock in this benchmark. It is far longer
// than any run, so no lock ever expires under load.
const ttl = 10 * time.Second

// batonNoHB is the options of Baton's main rows: no heartbeat, a 10s lease.
var batonNoHB = &batonlock.AcquireOpts{NoHeartbeat: true, TTL: ttl}

// newBaton returns batonlock on driver d. opts nil means Baton's defaults:
// a 10s lease kept by a heartbeat every 3.3s.
func newBaton(im *impl, d batondriver.Driver, opts *batonlock.AcquireOpts) (*impl, error) {
	l, err := batonlock.New(d, &batonlock.Config{TTL: ttl})
	if err != nil {
		return nil, err
	}
	lease := func(ls *batonlock.Lease, err error) (unlockFunc, error) {
		if errors.Is(err, batonlock.ErrNotAcquired) {
			return nil, errBusy
		}
		if err != nil {
			return nil, err
		}
		return ls.Release, nil
	}
	im.try = func(ctx context.Context, key string) (unlockFunc, error) { return lease(l.TryAcquire(ctx, key, opts)) }
	im.wait = func(ctx context.Context, key string) (unlockFunc, error) { return lease(l.Acquire(ctx, key, opts)) }
	return im, nil
}

// newBatonRedis is batonlock on batonredis over a default rueidis client.
func newBatonRedis(name, addr string, opts *batonlock.AcquireOpts) (*impl, error) {
	im := &impl{name: name}
	c, err := cmdcount.NewRueidis(addr, &im.sent)
	if err != nil {
		return nil, err
	}
	d, err := batonredis.New(c, &batonredis.Config{Prefix: "bench"})
	if err != nil {
		c.Close()
		return nil, err
	}
	im.close = func() { d.Close(); c.Close() }
	return newBaton(im, d, opts)
}

// newBatonMem is batonlock on a fresh batonmem driver.
func newBatonMem(name string, opts *batonlock.AcquireOpts) (*impl, error) {
	return newBaton(&impl{name: name, close: func() {}}, batonmem.New(), opts)
}

// newRedislock is github.com/bsm/redislock on a default go-redis v9 client.
// Its blocking acquire retries every 10ms (LinearBackoff(10ms)): the form its
// README shows, with the interval a user who wants quick handoff would pick.
func newRedislock(addr string) *impl {
	im := &impl{name: "redislock"}
	rc := cmdcount.NewGoRedis(addr, 0, &im.sent)
	lc := redislock.New(rc)
	obtain := func(ctx context.Context, key string, o *redislock.Options) (unlockFunc, error) {
		lk, err := lc.Obtain(ctx, key, ttl, o)
		if errors.Is(err, redislock.ErrNotObtained) {
			return nil, errBusy
		}
		if err != nil {
			return nil, err
		}
		return lk.Release, nil
	}
	retry := &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}
	im.try = func(ctx context.Context, key string) (unlockFunc, error) { return obtain(ctx, key, nil) }
	im.wait = func(ctx context.Context, key string) (unlockFunc, error) { return obtain(ctx, key, retry) }
	im.close = func() { rc.Close() }
	return im
}

// newRedsync is github.com/go-redsync/redsync/v4 with a single go-redis v9
// pool. The try is WithTries(1); the blocking acquire is LockContext with
// redsync's defaults (32 tries, 50-250ms random delay between them), which
// gives up with ErrFailed after the last try.
func newRedsync(addr string) *impl {
	im := &impl{name: "redsync"}
	rc := cmdcount.NewGoRedis(addr, 0, &im.sent)
	rs := redsync.New(goredis.NewPool(rc))
	lock := func(ctx context.Context, m *redsync.Mutex, tries int) (unlockFunc, error) {
		var err error
		if tries == 1 {
			err = m.TryLockContext(ctx)
		} else {
			err = m.LockContext(ctx)
		}
		var taken *redsync.ErrTaken
		if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
			if tries == 1 {
				return nil, errBusy
			}
			return nil, err
		}
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			ok, err := m.UnlockContext(ctx)
			if err == nil && !ok {
				err = errors.New("redsync: unlock reported not held")
			}
			return err
		}, nil
	}
	im.try = func(ctx context.Context, key string) (unlockFunc, error) {
		return lock(ctx, rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1)), 1)
	}
	im.wait = func(ctx context.Context, key string) (unlockFunc, error) {
		return lock(ctx, rs.NewMutex(key, redsync.WithExpiry(ttl)), 0)
	}
	im.close = func() { rc.Close() }
	return im
}

// newRueidislock is github.com/redis/rueidis/rueidislock. majority 0 keeps
// its defaults (each lock is 3 Redis keys, 2 of which must be taken;
// 5s validity extended every 2.5s; waiters woken by client-side-caching
// invalidations). majority 1 makes a lock one Redis key.
func newRueidislock(name, addr string, majority int32) (*impl, error) {
	im := &impl{name: name}
	lk, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  majority,
		ClientBuilder: func(o rueidis.ClientOption) (rueidis.Client, error) {
			c, err := rueidis.NewClient(o)
			if err != nil {
				return nil, err
			}
			return cmdcount.Rueidis{Client: c, N: &im.sent}, nil
		},
	})
	if err != nil {
		return nil, err
	}
	take := func(ctx context.Context, key string, try bool) (unlockFunc, error) {
		var cancel context.CancelFunc
		if try {
			_, cancel, err = lk.TryWithContext(ctx, key)
		} else {
			_, cancel, err = lk.WithContext(ctx, key)
		}
		if try && errors.Is(err, rueidislock.ErrNotLocked) {
			return nil, errBusy
		}
		if err != nil {
			return nil, err
		}
		// cancel deletes the keys and returns when they are deleted.
		return func(context.Context) error { cancel(); return nil }, nil
	}
	im.try = func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, true) }
	im.wait = func(ctx context.Context, key string) (unlockFunc, error) { return take(ctx, key, false) }
	im.close = lk.Close
	return im, nil
}

// compareAndDelete deletes KEYS[1] if it still holds the caller's token.
const compareAndDelete = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`

// newPlainGoRedis is the hand-written lock most code bases start with:
// SET key token NX PX ttl, released by a compare-and-delete script
// (EVALSHA), on a default go-redis v9 client (a pool of 10 connections per
// CPU, one command per connection at a time).
func newPlainGoRedis(addr string) *impl {
	im := &impl{name: "plain go-redis"}
	rc := cmdcount.NewGoRedis(addr, 0, &im.sent)
	cad := redis.NewScript(compareAndDelete)
	im.close = func() { rc.Close() }
	im.try = func(ctx context.Context, key string) (unlockFunc, error) {
		tok := token()
		ok, err := rc.SetNX(ctx, key, tok, ttl).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, errBusy
		}
		return func(ctx context.Context) error {
			n, err := cad.Run(ctx, rc, []string{key}, tok).Int64()
			if err == nil && n != 1 {
				err = fmt.Errorf("plain go-redis: %q not held at release", key)
			}
			return err
		}, nil
	}
	return im
}

// newPlainRueidis is the same lock on a default rueidis client, whose
// concurrent commands share one connection through auto-pipelining.
func newPlainRueidis(addr string) (*impl, error) {
	im := &impl{name: "plain rueidis"}
	c, err := cmdcount.NewRueidis(addr, &im.sent)
	if err != nil {
		return nil, err
	}
	cad := rueidis.NewLuaScript(compareAndDelete)
	im.close = c.Close
	im.try = func(ctx context.Context, key string) (unlockFunc, error) {
		tok := token()
		err := c.Do(ctx, c.B().Set().Key(key).Value(tok).Nx().Px(ttl).Build()).Error()
		if rueidis.IsRedisNil(err) {
			return nil, errBusy
		}
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			n, err := cad.Exec(ctx, c, []string{key}, []string{tok}).AsInt64()
			if err == nil && n != 1 {
				err = fmt.Errorf("plain rueidis: %q not held at release", key)
			}
			return err
		}, nil
	}
	return im, nil
}

// token returns 128 random bits, as every library here uses.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Package batonredis is Baton's Redis backend: standalone Redis, Sentinel and
// Redis Cluster, through a github.com/redis/rueidis client the caller owns.
//
// It implements both halves of batondriver.Driver: locks (one hash tag per
// lock key) and jobs (one hash tag per queue). Every transition is one Lua
// script whose keys share one hash tag, so each runs atomically on one
// Cluster slot; all times come from the server's TIME. Lock waiters are told
// of their grants by sharded Pub/Sub (SPUBLISH from the same script that
// freed the slot), so Redis 7.0 or newer is required. docs/redis-keys.md
// describes every key.
package batonredis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
)

// Config configures a Driver. The zero value is ready to use.
type Config struct {
	// Prefix starts every key and channel name the driver uses, followed by
	// a colon. Default "baton". It must not contain '{' or '}', which would
	// break the hash tags that keep a transition's keys in one Cluster slot.
	// Processes that share locks must use the same Prefix.
	Prefix string

	// ListenerLinger is how long the driver stays subscribed to a key's
	// grant channel after its last waiter in this process left, so that a
	// contended key does not cost a subscription round trip per wait.
	// Default 30s.
	ListenerLinger time.Duration

	// NoLockIndex stops this instance from adding the lock keys it uses to
	// the index that LockList reads (P:locks). Default false: each key
	// costs an entry of about 110 bytes there until a listing, or the
	// prune each instance runs in the background after every 1,000 keys
	// new to the index, finds it idle and removes it; and an extra command
	// after the script at its first use and then at most once every 30s.
	// Set it for processes that lock many short-lived keys on a Redis
	// nobody lists; their keys are then listed only if another instance
	// added them.
	NoLockIndex bool

	// LockIdleTTL is how long a lock key's counters and default limit (its
	// ":c" hash) outlive the last lease or waiting place that used them.
	// Default 1 minute. Then the hash goes, so idle keys keep nothing:
	// fences and waiters' arrival numbers are floored by the server clock
	// and keep rising without it. A key with a limit override keeps it for
	// good. Inspect shows an idle key's last fence and default limit only
	// until then.
	LockIdleTTL time.Duration
}

// defaultLockIdleTTL is Config.LockIdleTTL's default.
const defaultLockIdleTTL = time.Minute

// Driver is a batondriver.Driver on Redis. It is safe for concurrent use.
// Close it to stop its subscriptions; it never closes the client.
type Driver struct {
	client  rueidis.Client
	prefix  string
	linger  time.Duration
	idle    string // Config.LockIdleTTL in ms, for the lock scripts
	id      string // names this instance's grant channels
	scripts *scripts

	queuesSeen sync.Map     // queue names this instance added to the set of queues
	keyCache   keyCache     // the keys of the queues used lately (jobkeys.go)
	clocks     serverClocks // each queue's server clock, for fetch deadlines (serverclock.go)
	leases     leaseRecords // record keys and lost leasing calls (leaserecords.go)
	locksSeen  recentKeys   // lock keys this instance added to the index lately (lockindex.go)
	noIndex    bool         // Config.NoLockIndex
	prune      indexPruner

	noticeIDs atomic.Uint64 // names QueueListen's listeners

	mu     sync.Mutex
	subs   map[string]*subscription // by channel
	closed bool
	wg     sync.WaitGroup
}

var _ batondriver.Driver = (*Driver)(nil)

// New returns a Driver using client. It does not contact Redis.
func New(client rueidis.Client, cfg *Config) (*Driver, error) {
	if client == nil {
		return nil, errors.New("batonredis: nil client")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = "baton"
	}
	if strings.ContainsAny(prefix, "{}") {
		return nil, fmt.Errorf("batonredis: Prefix %q must not contain '{' or '}'", prefix)
	}
	linger := cfg.ListenerLinger
	if linger < 0 {
		return nil, fmt.Errorf("batonredis: negative ListenerLinger %v", linger)
	}
	if linger == 0 {
		linger = 30 * time.Second
	}
	idle := cfg.LockIdleTTL
	if idle != 0 && idle < time.Millisecond {
		return nil, fmt.Errorf("batonredis: LockIdleTTL %v (0 for the default, or at least 1ms)", idle)
	}
	if idle == 0 {
		idle = defaultLockIdleTTL
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, fmt.Errorf("batonredis: instance id: %w", err)
	}
	return &Driver{
		client:  client,
		prefix:  prefix,
		linger:  linger,
		idle:    ms(idle),
		id:      hex.EncodeToString(id[:]),
		scripts: defaultScripts.withOwnLibrary(),
		subs:    make(map[string]*subscription),
		noIndex: cfg.NoLockIndex,
	}, nil
}

// Close ends the driver's subscriptions and waits for their goroutines.
// Listeners still open receive nothing more. It does not close the client.
func (d *Driver) Close() {
	d.mu.Lock()
	d.closed = true
	for _, s := range d.subs {
		s.stop()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// LockAcquire implements batondriver.LockDriver.
func (d *Driver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	if err := batondriver.CheckLockAcquire(p); err != nil {
		return nil, err
	}
	return d.acquire(ctx, p, d.scripts.acquire)
}

// acquire runs an acquire script (the tests run broken variants through it,
// with extra arguments) and maps its reply.
func (d *Driver) acquire(ctx context.Context, p *batondriver.LockAcquireParams, script *rueidis.Lua, extra ...string) (*batondriver.LockAcquireResult, error) {
	mode := "try"
	switch {
	case p.Recheck:
		mode = "recheck"
	case p.Wait:
		mode = "wait"
	}
	k := d.lockKeys(p.Key)
	args := append([]string{p.Token, ms(p.TTL), itoa(p.Limit), mode, ms(p.WaitTTL), k.channel, d.id, d.idle}, extra...)
	v, err := d.runIndexed(ctx, script, "acquire", p.Key, k.keys, args...)
	if err != nil {
		return nil, err
	}
	if len(v) != 6 {
		return nil, fmt.Errorf("batonredis: acquire %q: unexpected reply %v", p.Key, v)
	}
	return &batondriver.LockAcquireResult{
		Granted:    v[0] == 1,
		Fence:      uint64(v[1]),
		TTL:        time.Duration(v[2]) * time.Millisecond,
		Position:   int(v[3]),
		NextExpiry: time.Duration(v[4]) * time.Millisecond,
		Now:        time.UnixMilli(v[5]),
	}, nil
}

// LockRelease implements batondriver.LockDriver.
func (d *Driver) LockRelease(ctx context.Context, p *batondriver.LockReleaseParams) (*batondriver.LockReleaseResult, error) {
	if err := batondriver.CheckLockRelease(p); err != nil {
		return nil, err
	}
	k := d.lockKeys(p.Key)
	v, err := d.run(ctx, d.scripts.release, "release", p.Key, k.keys,
		p.Token, utoa(p.Fence), k.channel, ms(p.WaitTTL), d.idle)
	if err != nil {
		return nil, err
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("batonredis: release %q: unexpected reply %v", p.Key, v)
	}
	return &batondriver.LockReleaseResult{Released: v[0] == 1, Promoted: int(v[1])}, nil
}

// LockExtend implements batondriver.LockDriver.
func (d *Driver) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	if err := batondriver.CheckLockExtend(p); err != nil {
		return nil, err
	}
	k := d.lockKeys(p.Key)
	v, err := d.runIndexed(ctx, d.scripts.extend, "extend", p.Key, k.keys,
		utoa(p.Fence)+":"+p.Token, ms(p.TTL), k.channel, d.idle)
	if err != nil {
		return nil, err
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("batonredis: extend %q: unexpected reply %v", p.Key, v)
	}
	return &batondriver.LockExtendResult{Extended: v[0] == 1, Now: time.UnixMilli(v[1])}, nil
}

// LockSetLimit implements batondriver.LockDriver.
func (d *Driver) LockSetLimit(ctx context.Context, p *batondriver.LockSetLimitParams) (*batondriver.LockSetLimitResult, error) {
	if err := batondriver.CheckLockSetLimit(p); err != nil {
		return nil, err
	}
	limit := ""
	if !p.Reset {
		limit = itoa(p.Limit)
	}
	k := d.lockKeys(p.Key)
	var resp rueidis.RedisResult
	if p.Reset {
		resp = execLua(ctx, d.client, d.scripts.setLimit, k.keys, []string{limit, k.channel, d.idle})
	} else {
		// An override keeps the key listed: add it even if this instance
		// did lately, since a listing may have pruned it while idle.
		resp = d.execIndexed(ctx, d.scripts.setLimit, p.Key, k.keys, []string{limit, k.channel, d.idle}, true)
	}
	n, err := resp.AsInt64()
	if err != nil {
		return nil, fmt.Errorf("batonredis: set limit of %q: %w", p.Key, err)
	}
	return &batondriver.LockSetLimitResult{Promoted: int(n)}, nil
}

// maxInspectWaiters bounds the waiters LockInspect lists.
const maxInspectWaiters = 1000

// LockInspect implements batondriver.LockDriver. It lists at most the first
// 1000 waiters; WaiterCount counts them all.
func (d *Driver) LockInspect(ctx context.Context, p *batondriver.LockInspectParams) (*batondriver.LockInspectResult, error) {
	if err := batondriver.CheckLockInspect(p); err != nil {
		return nil, err
	}
	k := d.lockKeys(p.Key)
	arr, err := execLua(ctx, d.client, d.scripts.inspect, k.keys, []string{itoa(maxInspectWaiters)}).ToArray()
	if err != nil {
		return nil, fmt.Errorf("batonredis: inspect %q: %w", p.Key, err)
	}
	return inspectResult(p.Key, arr)
}

// inspectResult converts inspect.lua's reply.
func inspectResult(key string, arr []rueidis.RedisMessage) (*batondriver.LockInspectResult, error) {
	if len(arr) != 7 {
		return nil, fmt.Errorf("batonredis: inspect %q: unexpected reply of %d elements", key, len(arr))
	}
	now, _ := arr[0].AsInt64()
	res := &batondriver.LockInspectResult{Now: time.UnixMilli(now)}
	override, errOverride := arr[1].AsInt64()
	def, errDef := arr[2].AsInt64()
	switch {
	case errOverride == nil:
		res.Limit, res.Override = int(override), true
	case errDef == nil:
		res.Limit = int(def)
	}
	if f, err := arr[3].AsInt64(); err == nil {
		res.LastFence = uint64(f)
	}
	holders, _ := arr[4].AsStrSlice()
	for i := 0; i+1 < len(holders); i += 2 {
		fence, token, _ := strings.Cut(holders[i], ":")
		f, _ := parseUint(fence)
		res.Holders = append(res.Holders, batondriver.LockHolder{
			Token: token, Fence: f, TTL: msUntil(holders[i+1], now),
		})
	}
	slices.SortFunc(res.Holders, func(a, b batondriver.LockHolder) int { return cmp.Compare(a.Fence, b.Fence) })
	waiters, _ := arr[5].AsStrSlice()
	for i := 0; i+1 < len(waiters); i += 2 {
		res.Waiters = append(res.Waiters, batondriver.LockWaiter{
			Token: waiters[i], TTL: msUntil(waiters[i+1], now),
		})
	}
	count, _ := arr[6].AsInt64()
	res.WaiterCount = int(count)
	return res, nil
}

// run executes a script whose reply is an array of integers.
func (d *Driver) run(ctx context.Context, s *rueidis.Lua, op, key string, keys []string, args ...string) ([]int64, error) {
	v, err := execLua(ctx, d.client, s, keys, args).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("batonredis: %s %q: %w", op, key, err)
	}
	return v, nil
}

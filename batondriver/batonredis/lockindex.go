package batonredis

import (
	"cmp"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
)

// The lock key index, P:locks: a sorted set of the lock keys in use, every
// score 0 so that it is ordered by the keys' bytes and can be read a page at
// a time by rank or after a key (BYLEX), without a SCAN.
//
// It has no lock key's hash tag, so no lock script may write it (on a
// Cluster a script touches one slot). Like P:queues it is written
// best-effort instead: an instance adds a key (ZADD NX) after a successful
// acquire or extend of it — its own command, not atomic with it — and at
// most once per key every lockIndexPeriod or two; SetLimit adds the
// key each time. LockList removes (ZREM) the keys it finds idle, with no
// holder, waiter or override, and each instance's background prune below
// those with nothing left in Redis. A key that is locked again after a listing
// pruned it, or whose index write failed, is listed again at its first
// acquire, wait refresh or heartbeat after each instance's memory of it
// lapsed: at most two periods. docs/redis-keys.md says what that costs.

// lockIndexPeriod is how long an instance remembers adding a key to the
// index: between one and two periods.
const lockIndexPeriod = 30 * time.Second

// recentKeys is the set of keys an instance added to the index lately, in
// two generations that turn over every period: memory is bounded by the
// keys used in the last two periods. The zero value is ready to use.
type recentKeys struct {
	mu       sync.Mutex
	period   time.Duration    // 0: lockIndexPeriod
	now      func() time.Time // nil: time.Now; tests set both
	cur, old map[string]struct{}
	since    time.Time // when cur began
}

// turn starts a new generation when the current one is a period old (and
// forgets both when it is two). r.mu must be held.
func (r *recentKeys) turn() {
	now := time.Now()
	if r.now != nil {
		now = r.now()
	}
	period := r.period
	if period == 0 {
		period = lockIndexPeriod
	}
	switch age := now.Sub(r.since); {
	case r.cur == nil || age >= 2*period:
		r.cur, r.old, r.since = map[string]struct{}{}, nil, now
	case age >= period:
		r.cur, r.old, r.since = map[string]struct{}{}, r.cur, now
	}
}

// has reports whether key was added in this generation or the last.
func (r *recentKeys) has(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.turn()
	if _, ok := r.cur[key]; ok {
		return true
	}
	_, ok := r.old[key]
	return ok
}

// add records that key is in the index.
func (r *recentKeys) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.turn()
	r.cur[key] = struct{}{}
}

// scriptSHAs maps each script compile built to the SHA1 of its source, so
// that an EVALSHA of it can be pipelined with other commands (rueidis.Lua
// keeps its own to itself).
var scriptSHAs sync.Map

func registerScript(s *rueidis.Lua, src string) *rueidis.Lua {
	sum := sha1.Sum([]byte(src))
	scriptSHAs.Store(s, hex.EncodeToString(sum[:]))
	return s
}

// runIndexed is run for a transition that uses a lock key: it adds the key
// to the index in the same round trip unless this instance did lately.
func (d *Driver) runIndexed(ctx context.Context, s *rueidis.Lua, op, key string, keys []string, args ...string) ([]int64, error) {
	v, err := d.execIndexed(ctx, s, key, keys, args, false).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("batonredis: %s %q: %w", op, key, err)
	}
	return v, nil
}

// The index would keep every key ever locked until a listing met it idle,
// so each instance prunes it in the background too: after every
// indexPruneEvery keys it added that were new to the index, one goroutine
// looks at the next indexPruneBatch entries after where the last prune
// stopped (wrapping round at the end) and removes those whose key has
// nothing left in Redis: no holders, waiters or marks, and no ":c" (which
// outlives a key's last use by the idle TTL, and stays with an override).
// One EXISTS of the key's five keys tells, so a key locked once costs two
// EXISTS calls more, pipelined a hundred to a round trip. The index then
// holds about the keys in use or used within the idle TTL, plus those
// added since the prune last passed.
const (
	indexPruneEvery = 1000
	indexPruneBatch = 2000
)

// indexPruner is a Driver's background pruning of the index. The zero
// value is ready to use; tests set every and batch.
type indexPruner struct {
	added   atomic.Int64 // keys this instance added that were new to the index
	running atomic.Bool  // a prune goroutine is running
	every   int64        // 0: indexPruneEvery
	batch   int          // 0: indexPruneBatch
	// after is the last entry the last prune looked at ("" from the
	// start). Only the prune that set running touches it, and running's
	// atomic hand-over orders one prune's writes before the next's reads.
	after string
}

// noteAdded counts a key new to the index and, every indexPruneEvery of
// them, starts a prune unless one is running or the driver is closed.
func (d *Driver) noteAdded() {
	every := cmp.Or(d.prune.every, indexPruneEvery)
	if d.prune.added.Add(1)%every != 0 || !d.prune.running.CompareAndSwap(false, true) {
		return
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.prune.running.Store(false)
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		defer d.prune.running.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = d.pruneIndex(ctx, cmp.Or(d.prune.batch, indexPruneBatch)) // best-effort, like the adds
	}()
}

// pruneIndex looks at up to n entries of the index after the last prune's
// and removes those whose key has nothing left in Redis, lockListBatch at a
// time.
func (d *Driver) pruneIndex(ctx context.Context, n int) error {
	c, index := d.client, d.locksKey()
	after := d.prune.after
	defer func() { d.prune.after = after }()
	for n > 0 {
		from := "-"
		if after != "" {
			from = "(" + after
		}
		want := min(n, lockListBatch)
		names, err := c.Do(ctx, c.B().Zrange().Key(index).Min(from).Max("+").Bylex().Limit(0, int64(want)).Build()).AsStrSlice()
		if err != nil {
			return err
		}
		idle, err := d.unused(ctx, names)
		if err != nil {
			return err
		}
		if len(idle) > 0 {
			if err := c.Do(ctx, c.B().Zrem().Key(index).Member(idle...).Build()).Error(); err != nil {
				return err
			}
		}
		n -= len(names)
		if len(names) < want {
			after = "" // the end: the next prune starts from the beginning
			return nil
		}
		after = names[len(names)-1]
	}
	return nil
}

// unused returns the lock keys among names that have no key of their own
// left in Redis, with one pipelined EXISTS per key (each on its key's node).
func (d *Driver) unused(ctx context.Context, names []string) ([]string, error) {
	if len(names) == 0 {
		return nil, nil
	}
	c := d.client
	cmds := make(rueidis.Commands, len(names))
	for i, name := range names {
		cmds[i] = c.B().Exists().Key(d.lockKeys(name).keys...).Build()
	}
	var out []string
	for i, r := range c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, err
		}
		if n == 0 {
			out = append(out, names[i])
		}
	}
	return out, nil
}

// execIndexed runs script s on key's slot and then adds key to the index:
// always with force, else unless this instance did lately. The index write
// follows the script as its own command, once per key and period, so that
// the lock transitions themselves are sent exactly as without an index. A
// failed index write is not the transition's failure; it is tried again
// next time.
func (d *Driver) execIndexed(ctx context.Context, s *rueidis.Lua, key string, keys, args []string, force bool) rueidis.RedisResult {
	c := d.client
	res := execLua(ctx, c, s, keys, args)
	if d.noIndex || (!force && d.locksSeen.has(key)) || res.Error() != nil {
		return res
	}
	add := c.B().Zadd().Key(d.locksKey()).Nx().ScoreMember().ScoreMember(0, key).Build()
	if n, err := c.Do(ctx, add).AsInt64(); err == nil {
		d.locksSeen.add(key)
		if n == 1 {
			d.noteAdded()
		}
	}
	return res
}

func evalsha(c rueidis.Client, sha string, keys, args []string) rueidis.Completed {
	return c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// noScript reports an EVALSHA refused because the server does not have the
// script (yet, or any more); the script did not run.
func noScript(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsNoScript()
}

// lockListBatch is the fewest index entries LockList reads and inspects in
// one round trip, and lockListRounds bounds the entries one call inspects
// to that many batches of max(Limit, lockListBatch).
const (
	lockListBatch  = 100
	lockListRounds = 10
)

// LockList implements batondriver.LockDriver. It reads the index a batch at
// a time and inspects every key of a batch in one pipelined round trip (each
// EVALSHA goes to its key's node); it returns the keys in use, in byte
// order, and removes the idle ones from the index in the next round trip.
// Since it removes only entries at or after Offset, the entries before the
// next page's offset are exactly the keys returned so far. A call inspects
// at most 10 × max(Limit, 100) entries: an index full of idle keys yields
// short pages while the listing prunes it.
func (d *Driver) LockList(ctx context.Context, p *batondriver.LockListParams) (*batondriver.LockListResult, error) {
	limit, err := batondriver.PageSize(p.Limit, p.Offset)
	if err != nil {
		return nil, err
	}
	c, index := d.client, d.locksKey()
	res := &batondriver.LockListResult{Keys: []*batondriver.LockInfo{}}
	budget := lockListRounds * max(limit, lockListBatch)
	after := ""
	for {
		n := min(max(limit-len(res.Keys), lockListBatch), budget)
		var read rueidis.Completed
		if after == "" {
			stop := p.Offset + n - 1
			if stop < p.Offset {
				stop = math.MaxInt // an Offset near MaxInt
			}
			read = c.B().Zrange().Key(index).Min(itoa(p.Offset)).Max(itoa(stop)).Build()
		} else {
			read = c.B().Zrange().Key(index).Min("("+after).Max("+").Bylex().Limit(0, int64(n)).Build()
		}
		names, err := c.Do(ctx, read).AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("batonredis: list lock keys: %w", err)
		}
		infos, err := d.inspectMany(ctx, names)
		if err != nil {
			return nil, err
		}
		var idle []string
		for i, info := range infos {
			switch {
			case len(info.Holders) == 0 && info.WaiterCount == 0 && !info.Override:
				idle = append(idle, names[i])
			case len(res.Keys) < limit:
				res.Keys = append(res.Keys, &batondriver.LockInfo{Key: names[i], LockInspectResult: *info})
			}
		}
		budget -= len(names)
		done := len(names) < n || len(res.Keys) == limit || budget <= 0
		cmds := make(rueidis.Commands, 0, 2)
		if len(idle) > 0 {
			cmds = append(cmds, c.B().Zrem().Key(index).Member(idle...).Build())
		}
		if done {
			cmds = append(cmds, c.B().Zcard().Key(index).Build())
		}
		replies := c.DoMulti(ctx, cmds...)
		for _, r := range replies {
			if err := r.Error(); err != nil {
				return nil, fmt.Errorf("batonredis: list lock keys: %w", err)
			}
		}
		if done {
			total, _ := replies[len(replies)-1].AsInt64()
			res.Total = int(total)
			return res, nil
		}
		after = names[len(names)-1]
	}
}

// inspectMany inspects keys in one pipelined round trip (and one more if a
// node has not got the script yet).
func (d *Driver) inspectMany(ctx context.Context, keys []string) ([]*batondriver.LockInspectResult, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	c, s := d.client, d.scripts.inspect
	args := []string{itoa(maxInspectWaiters)}
	execs := make([]rueidis.LuaExec, len(keys))
	for i, key := range keys {
		execs[i] = rueidis.LuaExec{Keys: d.lockKeys(key).keys, Args: args}
	}
	var replies []rueidis.RedisResult
	if sha, ok := scriptSHAs.Load(s); ok {
		cmds := make(rueidis.Commands, len(keys))
		for i, e := range execs {
			cmds[i] = evalsha(c, sha.(string), e.Keys, e.Args)
		}
		replies = c.DoMulti(ctx, cmds...)
	}
	var missing []int
	for i := range keys {
		if replies == nil || noScript(replies[i].Error()) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		// ExecMulti loads the script on every node first.
		again := make([]rueidis.LuaExec, len(missing))
		for j, i := range missing {
			again[j] = execs[i]
		}
		redone := s.ExecMulti(ctx, c, again...)
		if replies == nil {
			replies = make([]rueidis.RedisResult, len(keys))
		}
		for j, i := range missing {
			replies[i] = redone[j]
		}
	}
	out := make([]*batondriver.LockInspectResult, len(keys))
	for i, r := range replies {
		arr, err := r.ToArray()
		if err != nil {
			return nil, fmt.Errorf("batonredis: inspect %q: %w", keys[i], err)
		}
		if out[i], err = inspectResult(keys[i], arr); err != nil {
			return nil, err
		}
	}
	return out, nil
}

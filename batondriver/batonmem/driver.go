// Package batonmem is Baton's in-memory backend: every guarantee of the Redis
// backend, for one process, with no server. It serves tests, demos and
// programs that need Baton's locks and jobs only within themselves.
//
// A call whose context has ended does nothing and returns the context's
// error, as a call to Redis does, once its parameters are found valid:
// invalid ones are refused with batondriver.ErrBadParams first, as Redis
// refuses them before sending anything. Once under way, a call is not cut
// short by its context (it takes microseconds), but for JobWait, which
// waits.
//
// Time is the process's monotonic clock. A lock key that goes idle (no
// holder, no waiter, no give-up mark) is forgotten at once unless it has a
// limit override: its fences come from one counter per Driver, so they keep
// rising across its idle spells. A key left with only expired leases,
// places or marks (a holder that crashed, a waiter that vanished) is
// forgotten when an acquire on another key of its shard comes across it,
// as Redis expires the same keys, so nothing grows with the keys ever used.
package batonmem

import (
	"cmp"
	"container/list"
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Driver is a batondriver.Driver in memory. The zero value is not usable;
// call New. It is safe for concurrent use.
type Driver struct {
	seed   maphash.Seed
	fences atomic.Uint64         // the last fencing token given, on any key
	shards [lockShards]lockShard // lock keys, spread by hash

	jobs  jobStore        // jobs.go; guarded by its own mutex
	procs processRegistry // processes.go; guarded by its own mutex
}

// lockShards spreads lock keys over independent mutexes, so that goroutines
// on different keys rarely wait for each other.
const lockShards = 64

// lockShard holds the state of the lock keys that hash to it.
type lockShard struct {
	mu        sync.Mutex
	fences    *atomic.Uint64        // the Driver's
	meta      map[string]*keyMeta   // while a key is in use or has an override
	locks     map[string]*lockState // while a key is in use
	listeners map[listenerID]*listener
}

// shard returns the shard of key.
func (d *Driver) shard(key string) *lockShard {
	return &d.shards[maphash.String(d.seed, key)%lockShards]
}

var _ batondriver.Driver = (*Driver)(nil)

// New returns an empty Driver.
func New() *Driver {
	d := &Driver{seed: maphash.MakeSeed()}
	for i := range d.shards {
		d.shards[i] = lockShard{
			fences:    &d.fences,
			meta:      make(map[string]*keyMeta),
			locks:     make(map[string]*lockState),
			listeners: make(map[listenerID]*listener),
		}
	}
	return d
}

type keyMeta struct {
	fence    uint64 // the key's last fencing token
	dlimit   int
	override *int
}

// nextFence gives the key the Driver's next fencing token. sh.mu must be
// held.
func (sh *lockShard) nextFence(m *keyMeta) uint64 {
	m.fence = sh.fences.Add(1)
	return m.fence
}

type lockState struct {
	holders map[string]*holder       // by token
	waiters *list.List               // of *waiter, in arrival order
	byToken map[string]*list.Element // waiters by token
	gone    map[string]time.Time     // tokens that gave up, until when (LockRelease); nil: none
}

type holder struct {
	fence   uint64
	expires time.Time
}

type waiter struct {
	token   string
	ttl     time.Duration // lease TTL to grant
	expires time.Time     // of the place
}

type listenerID struct{ key, token string }

type listener struct {
	sh *lockShard
	id listenerID
	ch chan batondriver.LockNotice
}

func (l *listener) C() <-chan batondriver.LockNotice { return l.ch }

func (l *listener) Close() {
	l.sh.mu.Lock()
	defer l.sh.mu.Unlock()
	if l.sh.listeners[l.id] == l {
		delete(l.sh.listeners, l.id)
	}
}

func (m *keyMeta) limit() int {
	if m.override != nil {
		return *m.override
	}
	return m.dlimit
}

// state returns the key's lock state, creating it. sh.mu must be held.
func (sh *lockShard) state(key string) (*keyMeta, *lockState) {
	m := sh.meta[key]
	if m == nil {
		m = &keyMeta{dlimit: 1}
		sh.meta[key] = m
	}
	s := sh.locks[key]
	if s == nil {
		s = &lockState{holders: make(map[string]*holder), waiters: list.New(), byToken: make(map[string]*list.Element)}
		sh.locks[key] = s
	}
	return m, s
}

// sweepEach is how many keys of its shard each LockAcquire looks at for
// leftovers (see sweep).
const sweepEach = 2

// sweep forgets up to sweepEach keys of the shard, in map order (which Go
// randomises), whose leases, places and give-up marks have all expired:
// nobody will release them. sh.mu must be held.
func (sh *lockShard) sweep(now time.Time) {
	n := 0
	for key, s := range sh.locks {
		if n == sweepEach {
			return
		}
		n++
		if !s.inUse(now) && !s.marked(now) {
			sh.forget(key)
		}
	}
}

// forget drops an idle key's state, and its meta unless it holds an
// override. sh.mu must be held.
func (sh *lockShard) forget(key string) {
	delete(sh.locks, key)
	if m := sh.meta[key]; m != nil && m.override == nil {
		delete(sh.meta, key)
	}
}

// marked reports whether a token's give-up mark is still in force.
func (s *lockState) marked(now time.Time) bool {
	for _, until := range s.gone {
		if until.After(now) {
			return true
		}
	}
	return false
}

// tidy forgets the key once it is idle, all but its override if it has
// one. sh.mu must be held.
func (sh *lockShard) tidy(key string, s *lockState) {
	if len(s.holders) == 0 && s.waiters.Len() == 0 && len(s.gone) == 0 {
		sh.forget(key)
	}
}

// settle drops expired holders and waiters and grants free slots to the
// waiters at the head of the queue. sh.mu must be held.
func (sh *lockShard) settle(key string, m *keyMeta, s *lockState, now time.Time) int {
	for tok, h := range s.holders {
		if !h.expires.After(now) {
			delete(s.holders, tok)
		}
	}
	for e := s.waiters.Front(); e != nil; {
		next := e.Next()
		if w := e.Value.(*waiter); !w.expires.After(now) {
			s.waiters.Remove(e)
			delete(s.byToken, w.token)
		}
		e = next
	}
	for tok, until := range s.gone {
		if !until.After(now) {
			delete(s.gone, tok)
		}
	}
	if m == nil {
		return 0 // only marks of tokens that gave up: no slot to grant
	}
	n := 0
	for len(s.holders) < m.limit() && s.waiters.Len() > 0 {
		w := s.waiters.Remove(s.waiters.Front()).(*waiter)
		delete(s.byToken, w.token)
		s.holders[w.token] = &holder{fence: sh.nextFence(m), expires: now.Add(w.ttl)}
		if l := sh.listeners[listenerID{key, w.token}]; l != nil {
			select {
			case l.ch <- batondriver.LockNotice{Fence: m.fence, GrantedAt: now, TTL: w.ttl}:
			default:
			}
		}
		n++
	}
	return n
}

func (s *lockState) nextExpiry(now time.Time) time.Duration {
	var first time.Duration
	for _, h := range s.holders {
		if left := h.expires.Sub(now); first == 0 || left < first {
			first = left
		}
	}
	return first
}

func (s *lockState) position(token string) int {
	pos := 1
	for e := s.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*waiter).token == token {
			return pos
		}
		pos++
	}
	return 0
}

// LockAcquire implements batondriver.LockDriver.
func (d *Driver) LockAcquire(ctx context.Context, p *batondriver.LockAcquireParams) (*batondriver.LockAcquireResult, error) {
	if err := batondriver.CheckLockAcquire(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	wait := p.Wait || p.Recheck
	sh := d.shard(p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	sh.sweep(now)
	m, s := sh.state(p.Key)
	defer sh.tidy(p.Key, s)
	if until, gone := s.gone[p.Token]; gone && wait && until.After(now) {
		// A slot the token took since it gave up (a Try, which the mark
		// does not stop) is reported as any holder's: what a token holds
		// goes before its mark. Else the call, sent before its caller gave
		// up, comes too late: it changes nothing (as on Redis).
		if h := s.holders[p.Token]; h != nil && h.expires.After(now) {
			return &batondriver.LockAcquireResult{Granted: true, Fence: h.fence, TTL: h.expires.Sub(now), Now: now}, nil
		}
		return &batondriver.LockAcquireResult{NextExpiry: s.nextExpiry(now), Now: now}, nil
	}
	m.dlimit = p.Limit
	sh.settle(p.Key, m, s, now)
	if p.Recheck {
		if e := s.byToken[p.Token]; e != nil {
			e.Value.(*waiter).expires = now.Add(p.WaitTTL)
			return &batondriver.LockAcquireResult{Position: s.position(p.Token), NextExpiry: s.nextExpiry(now), Now: now}, nil
		}
	}
	// A token that holds a slot is granted no second one, in any mode: the
	// call reports its grant. settle dropped a lease that ran out: its
	// token asks anew.
	if h := s.holders[p.Token]; h != nil {
		return &batondriver.LockAcquireResult{Granted: true, Fence: h.fence, TTL: h.expires.Sub(now), Now: now}, nil
	}
	if s.waiters.Len() == 0 && len(s.holders) < m.limit() {
		s.holders[p.Token] = &holder{fence: sh.nextFence(m), expires: now.Add(p.TTL)}
		return &batondriver.LockAcquireResult{Granted: true, Fence: m.fence, TTL: p.TTL, Now: now}, nil
	}
	res := &batondriver.LockAcquireResult{NextExpiry: s.nextExpiry(now), Now: now}
	if !wait {
		return res, nil
	}
	if e := s.byToken[p.Token]; e != nil {
		s.waiters.Remove(e) // queued again, last, as on Redis: never twice
	}
	s.byToken[p.Token] = s.waiters.PushBack(&waiter{token: p.Token, ttl: p.TTL, expires: now.Add(p.WaitTTL)})
	res.Position = s.waiters.Len()
	return res, nil
}

// LockRelease implements batondriver.LockDriver.
func (d *Driver) LockRelease(ctx context.Context, p *batondriver.LockReleaseParams) (*batondriver.LockReleaseResult, error) {
	if err := batondriver.CheckLockRelease(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sh := d.shard(p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	s := sh.locks[p.Key]
	if s == nil {
		if p.Fence != 0 || p.WaitTTL == 0 {
			return &batondriver.LockReleaseResult{}, nil
		}
		s = &lockState{holders: make(map[string]*holder), waiters: list.New(), byToken: make(map[string]*list.Element)}
		sh.locks[p.Key] = s // to hold the mark below
	}
	defer sh.tidy(p.Key, s)
	res := &batondriver.LockReleaseResult{}
	if e := s.byToken[p.Token]; e != nil && p.Fence == 0 {
		s.waiters.Remove(e)
		delete(s.byToken, p.Token)
	} else if h := s.holders[p.Token]; h != nil && (p.Fence == 0 || p.Fence == h.fence) {
		// Held until reclaimed: an expired lease that no transition removed
		// yet was not had by anyone else (as on Redis).
		delete(s.holders, p.Token)
		res.Released = true
	}
	if p.Fence == 0 && p.WaitTTL > 0 {
		if s.gone == nil {
			s.gone = make(map[string]time.Time)
		}
		s.gone[p.Token] = now.Add(p.WaitTTL)
	}
	res.Promoted = sh.settle(p.Key, sh.meta[p.Key], s, now)
	return res, nil
}

// LockExtend implements batondriver.LockDriver.
func (d *Driver) LockExtend(ctx context.Context, p *batondriver.LockExtendParams) (*batondriver.LockExtendResult, error) {
	if err := batondriver.CheckLockExtend(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sh := d.shard(p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	res := &batondriver.LockExtendResult{Now: now}
	s := sh.locks[p.Key]
	if s == nil {
		return res, nil
	}
	defer sh.tidy(p.Key, s)
	h := s.holders[p.Token]
	if h == nil || h.fence != p.Fence {
		return res, nil
	}
	if !h.expires.After(now) {
		sh.settle(p.Key, sh.meta[p.Key], s, now)
		return res, nil
	}
	h.expires = now.Add(p.TTL)
	res.Extended = true
	return res, nil
}

// LockSetLimit implements batondriver.LockDriver.
func (d *Driver) LockSetLimit(ctx context.Context, p *batondriver.LockSetLimitParams) (*batondriver.LockSetLimitResult, error) {
	if err := batondriver.CheckLockSetLimit(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sh := d.shard(p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m, s := sh.state(p.Key)
	defer sh.tidy(p.Key, s)
	if p.Reset {
		m.override = nil
	} else {
		n := p.Limit
		m.override = &n
	}
	return &batondriver.LockSetLimitResult{Promoted: sh.settle(p.Key, m, s, time.Now())}, nil
}

// LockInspect implements batondriver.LockDriver.
func (d *Driver) LockInspect(ctx context.Context, p *batondriver.LockInspectParams) (*batondriver.LockInspectResult, error) {
	if err := batondriver.CheckLockInspect(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sh := d.shard(p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := time.Now()
	res := &batondriver.LockInspectResult{Now: now}
	m := sh.meta[p.Key]
	if m == nil {
		return res, nil
	}
	res.Limit, res.Override, res.LastFence = m.limit(), m.override != nil, m.fence
	s := sh.locks[p.Key]
	if s == nil {
		return res, nil
	}
	for tok, h := range s.holders {
		if h.expires.After(now) {
			res.Holders = append(res.Holders, batondriver.LockHolder{Token: tok, Fence: h.fence, TTL: h.expires.Sub(now)})
		}
	}
	slices.SortFunc(res.Holders, func(a, b batondriver.LockHolder) int { return cmp.Compare(a.Fence, b.Fence) })
	for e := s.waiters.Front(); e != nil; e = e.Next() {
		if w := e.Value.(*waiter); w.expires.After(now) {
			res.Waiters = append(res.Waiters, batondriver.LockWaiter{Token: w.token, TTL: w.expires.Sub(now)})
		}
	}
	res.WaiterCount = len(res.Waiters)
	return res, nil
}

// LockListen implements batondriver.LockDriver.
func (d *Driver) LockListen(ctx context.Context, p *batondriver.LockListenParams) (batondriver.LockListener, error) {
	if err := batondriver.CheckLockListen(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l := &listener{sh: d.shard(p.Key), id: listenerID{p.Key, p.Token}, ch: make(chan batondriver.LockNotice, 4)}
	l.sh.mu.Lock()
	l.sh.listeners[l.id] = l
	l.sh.mu.Unlock()
	return l, nil
}

package batonmem

import (
	"context"
	"slices"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// LockList implements batondriver.LockDriver. The shards are its index: it
// collects the keys in use from every shard, one shard locked at a time, so
// a call costs O(keys in use or with an override); Total is exact.
func (d *Driver) LockList(ctx context.Context, p *batondriver.LockListParams) (*batondriver.LockListResult, error) {
	limit, err := batondriver.PageSize(p.Limit, p.Offset)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var inUse []string
	for i := range d.shards {
		sh := &d.shards[i]
		sh.mu.Lock()
		now := time.Now()
		for key, m := range sh.meta {
			if m.override != nil || sh.locks[key].inUse(now) {
				inUse = append(inUse, key)
			}
		}
		sh.mu.Unlock()
	}
	slices.Sort(inUse)
	res := &batondriver.LockListResult{Keys: []*batondriver.LockInfo{}, Total: len(inUse)}
	start := min(p.Offset, len(inUse))
	for _, key := range inUse[start:min(start+limit, len(inUse))] {
		info, err := d.LockInspect(ctx, &batondriver.LockInspectParams{Key: key})
		if err != nil {
			return nil, err
		}
		res.Keys = append(res.Keys, &batondriver.LockInfo{Key: key, LockInspectResult: *info})
	}
	return res, nil
}

// inUse reports whether the key has an unexpired holder or waiter. s may be
// nil: a key with no transient state.
func (s *lockState) inUse(now time.Time) bool {
	if s == nil {
		return false
	}
	for _, h := range s.holders {
		if h.expires.After(now) {
			return true
		}
	}
	for e := s.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*waiter).expires.After(now) {
			return true
		}
	}
	return false
}

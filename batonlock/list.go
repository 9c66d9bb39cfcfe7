package batonlock

import (
	"context"
	"fmt"

	"github.com/batonhq/baton/batondriver"
)

// ListOpts are the options of List. nil means the defaults.
type ListOpts struct {
	// Limit is the page size: at most 1000. Default 100.
	Limit int
	// Offset skips that many keys. Default 0.
	Offset int
}

// List lists the keys in use — with unexpired holders or waiters, or a
// limit stored with SetLimit — in the byte order of their names, a page at
// a time, each as Inspect reports it. It reads the backend's index of keys,
// never a scan; each key is read atomically, the page as a whole is no
// snapshot.
//
// total counts the keys in the index. A page holds Limit keys unless the
// listing ends (Offset plus the keys returned reaches total), or, rarely,
// the Redis index holds so many idle keys in a row that a page comes
// short; the next page starts at Offset plus the keys returned. On Redis
// the index is best-effort: a listing removes the idle keys it meets, so
// total may count idle keys past the page not yet met, and a key locked
// again after a listing removed it can take up to a minute (if it is held
// all along, until its holder's next heartbeat after that) to be listed
// again. docs/redis-keys.md has the details.
func (l *Locker) List(ctx context.Context, opts *ListOpts) (keys []*Info, total int, err error) {
	if opts == nil {
		opts = &ListOpts{}
	}
	if opts.Limit < 0 || opts.Limit > 1000 || opts.Offset < 0 {
		return nil, 0, fmt.Errorf("batonlock: list: %w: Limit %d out of range 0..1000 or Offset %d negative", batondriver.ErrBadParams, opts.Limit, opts.Offset)
	}
	limit := opts.Limit
	if limit == 0 {
		limit = 100
	}
	keys = []*Info{}
	// A backend that prunes its index as it lists may return a short page
	// while more follow: ask again for the rest, a bounded number of times.
	for range maxListCalls {
		res, err := l.driver.LockList(ctx, &batondriver.LockListParams{Limit: limit - len(keys), Offset: opts.Offset + len(keys)})
		if err != nil {
			return nil, 0, fmt.Errorf("batonlock: list: %w", err)
		}
		for _, k := range res.Keys {
			keys = append(keys, newInfo(k.Key, &k.LockInspectResult))
		}
		total = res.Total
		if len(keys) == limit || opts.Offset+len(keys) >= total {
			break
		}
	}
	return keys, total, nil
}

// maxListCalls bounds the backend calls of one List. Each call of the
// Redis backend inspects up to 10 × max(Limit, 100) entries of its index,
// so a page comes short only from an index with tens of thousands of idle
// keys in a row that no listing has pruned yet.
const maxListCalls = 8

// newInfo is an Info of what the backend reported on key.
func newInfo(key string, res *batondriver.LockInspectResult) *Info {
	return &Info{
		Key: key, Limit: res.Limit, Override: res.Override, LastFence: res.LastFence,
		Holders: res.Holders, Waiters: res.Waiters, WaiterCount: res.WaiterCount,
	}
}

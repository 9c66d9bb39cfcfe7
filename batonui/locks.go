package batonui

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/batonhq/baton/batonlock"
)

// The locks page lists the standalone lock keys in use, a page at a time
// (Locker.List), besides the lookup box and Config.LockKeys (pages.go).

// lockRow is a key in use as the locks page lists it.
type lockRow struct {
	*lockView
	URL string // the key's lookup on the locks page
	// FirstEnd is when the first lease ends unless a heartbeat extends it;
	// zero with no holders.
	FirstEnd time.Time
}

// lockURL is the locks page looking key up. The key travels in the query,
// escaped byte by byte, as on the keys pages (keys.go).
func (h *handler) lockURL(key string) string {
	return h.base + "/locks?key=" + queryEscape(key)
}

// listLocks fills d with the page of keys in use. A backend error is shown
// on the page, so that the lookup box still serves.
func (h *handler) listLocks(r *http.Request, d *locksData, page int) {
	size := h.cfg.PageSize
	keys, total, err := h.cfg.Locker.List(r.Context(), &batonlock.ListOpts{Limit: size, Offset: (page - 1) * size})
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			h.cfg.Logger.Error("batonui: list locks", "err", err)
		}
		d.ListErr = err.Error()
		return
	}
	for _, info := range keys {
		v := h.newLockView(info)
		row := lockRow{lockView: v, URL: h.lockURL(info.Key)}
		for _, ho := range v.Holders {
			if row.FirstEnd.IsZero() || ho.Until.Before(row.FirstEnd) {
				row.FirstEnd = ho.Until
			}
		}
		d.InUse = append(d.InUse, row)
	}
	d.Pager = h.newPager(r, page, total, len(keys))
}

// newLockView is what the locks page shows of info. It never holds a
// holder's token: a token is what releases or extends a lease.
func (h *handler) newLockView(info *batonlock.Info) *lockView {
	now := h.now()
	v := &lockView{Key: info.Key, Limit: info.Limit, Override: info.Override, LastFence: info.LastFence, WaiterCount: info.WaiterCount}
	for _, ho := range info.Holders {
		v.Holders = append(v.Holders, lockHolder{Fence: ho.Fence, Until: now.Add(ho.TTL)})
	}
	for i, wt := range info.Waiters {
		if i == maxWaitersShown {
			break
		}
		v.Waiters = append(v.Waiters, now.Add(wt.TTL))
	}
	return v
}

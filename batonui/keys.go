package batonui

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// The keys pages: a queue's concurrency keys, one key with its holders,
// and the forms that set, halt and reset a key's limit.
//
// A key may hold any bytes, '/', '.', '..', spaces and braces included, so
// it travels in the query (?key=), escaped byte by byte, never as a path
// segment: a path would be cleaned by muxes ("a/../b", "."), and an
// escaped slash (%2F) is decoded or refused by many proxies in front of
// the dashboard. The key page is /queues/{queue}/keys?key=...; the path
// form /queues/{queue}/keys/{key...} is accepted for URLs typed by hand
// and redirects there.

func (h *handler) keysURL(queue string) string {
	return h.base + "/queues/" + url.PathEscape(queue) + "/keys"
}

func (h *handler) keyURL(queue, key string) string {
	return h.keysURL(queue) + "?key=" + queryEscape(key)
}

// keyActionURL is where a key's form posts: action is "limit" or "reset".
func (h *handler) keyActionURL(queue, key, action string) string {
	return h.keysURL(queue) + "/" + action + "?key=" + queryEscape(key)
}

// queryEscape escapes s for a query, byte by byte, with spaces as %20
// rather than '+', which reads better in a link and needs no escaping in
// HTML.
func queryEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// The orders of the keys page.
const (
	sortParked = "parked" // most parked first: the backend's order
	sortWait   = "wait"   // oldest parked first, within the page fetched
)

type keysData struct {
	Stats  *baton.QueueStats
	Keys   []*baton.KeyInfo
	Sort   string
	Pager  pager
	Return string
	// SortParked and SortWait are the links that sort the list.
	SortParked, SortWait string
}

// keys serves the keys page of a queue, or with ?key= one key's page.
func (h *handler) keys(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("key") != "" {
		h.key(w, r)
		return
	}
	name := r.PathValue("queue")
	page, err := pageParam(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	order := cmp.Or(r.URL.Query().Get("sort"), sortParked)
	if order != sortParked && order != sortWait {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Unknown order %q: keys sort by %q or %q.", order, sortParked, sortWait))
		return
	}
	h.sampleIfDue(r.Context())
	st, err := h.client.QueueStats(r.Context(), name)
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	size := h.cfg.PageSize
	keys, total, err := h.client.KeyList(r.Context(), name, &baton.KeyListOpts{Limit: size, Offset: (page - 1) * size})
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	if order == sortWait {
		// The backend orders by parked count only: sort what it returned.
		slices.SortStableFunc(keys, func(a, b *baton.KeyInfo) int {
			switch az, bz := a.OldestParked.IsZero(), b.OldestParked.IsZero(); {
			case az && bz:
				return 0
			case az:
				return 1 // nothing parked: last
			case bz:
				return -1
			}
			return a.OldestParked.Compare(b.OldestParked)
		})
	}
	sortLink := func(o string) string {
		if o == sortParked {
			return h.keysURL(name)
		}
		return h.keysURL(name) + "?sort=" + o
	}
	d := &keysData{
		Stats: st, Keys: keys, Sort: order, Pager: h.newPager(r, page, total, len(keys)), Return: h.here(r),
		SortParked: sortLink(sortParked), SortWait: sortLink(sortWait),
	}
	h.render(w, r, http.StatusOK, "keys", &view{Title: "Keys of " + name, Nav: "overview", Data: d})
}

type keyData struct {
	Key  *baton.KeyInfo
	Idle bool // the key keeps no state: shown only to set its limit
	// The key's parked jobs, a page of them in the order they will run,
	// for the jobtable partial.
	State  baton.JobState
	Jobs   []*baton.JobRow
	Pager  pager
	Return string
}

// key serves one key's page: its limit, counts, holders and a page of its
// parked jobs (?page=), next to run first.
func (h *handler) key(w http.ResponseWriter, r *http.Request) {
	queue, key := r.PathValue("queue"), r.URL.Query().Get("key")
	if err := batondriver.CheckKey(key); err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("A concurrency key has 1 to %d bytes; this one has %d.", batondriver.MaxKeyLen, len(key)))
		return
	}
	page, err := pageParam(r)
	if err != nil {
		h.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	h.sampleIfDue(r.Context())
	info, err := h.client.KeyGet(r.Context(), queue, key)
	if errors.Is(err, baton.ErrKeyNotFound) && h.cfg.Writable {
		// Not found, but a limit may be stored for it ahead of its jobs
		// (a key halted before it is used): the page offers the forms.
		idle := &baton.KeyInfo{Queue: queue, Key: key, Limit: -1}
		h.render(w, r, http.StatusNotFound, "key", &view{Title: "Key " + truncate(key, 60), Nav: "overview", Data: &keyData{Key: idle, Idle: true}})
		return
	}
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	size := h.cfg.PageSize
	jobs, total, err := h.client.JobList(r.Context(), queue, baton.JobStateParked,
		&baton.JobListOpts{Key: key, Limit: size, Offset: (page - 1) * size})
	if err != nil {
		h.backendError(w, r, err)
		return
	}
	d := &keyData{Key: info, State: baton.JobStateParked, Jobs: jobs, Pager: h.newPager(r, page, total, len(jobs)), Return: h.here(r)}
	h.render(w, r, http.StatusOK, "key", &view{Title: "Key " + truncate(key, 60), Nav: "overview", Data: d})
}

// keyPath takes a key given in the path, as typed by hand, to its page.
// The mux has decoded it (%2F included); a key that path cleaning would
// change ("a//b", "..") only reaches its page through ?key=.
func (h *handler) keyPath(w http.ResponseWriter, r *http.Request) {
	queue, key := r.PathValue("queue"), r.PathValue("key")
	target := h.keysURL(queue)
	if key != "" {
		target = h.keyURL(queue, key)
	}
	http.Redirect(w, r, target, http.StatusFound)
}

// setLimit stores a key's limit (0 halts it). The key is in the query, the
// limit in the form.
func (h *handler) setLimit(w http.ResponseWriter, r *http.Request) {
	queue, key, ok := h.actionKey(w, r)
	if !ok {
		return
	}
	raw := strings.TrimSpace(r.PostFormValue("limit"))
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > baton.MaxKeyLimit {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The limit %q is not a whole number from 0 to %d. Enter how many jobs of the key may run at once: 0 halts the key.", truncate(raw, 40), baton.MaxKeyLimit))
		return
	}
	if _, err := h.client.SetLimit(r.Context(), queue, key, n); err != nil {
		h.backendError(w, r, err)
		return
	}
	h.cfg.Logger.Info("batonui: key limit set", "queue", queue, "key", key, "limit", n)
	done := "limit"
	if n == 0 {
		done = "halted"
	}
	h.redirectTo(w, r, h.keyURL(queue, key), done)
}

// resetLimit removes a key's stored limit: the kinds' defaults apply.
func (h *handler) resetLimit(w http.ResponseWriter, r *http.Request) {
	queue, key, ok := h.actionKey(w, r)
	if !ok {
		return
	}
	if _, err := h.client.ResetLimit(r.Context(), queue, key); err != nil {
		h.backendError(w, r, err)
		return
	}
	h.cfg.Logger.Info("batonui: key limit reset", "queue", queue, "key", key)
	h.redirectTo(w, r, h.keyURL(queue, key), "reset")
}

// actionKey reads the queue and key a key action is for, or answers 400.
func (h *handler) actionKey(w http.ResponseWriter, r *http.Request) (queue, key string, ok bool) {
	queue, key = r.PathValue("queue"), r.URL.Query().Get("key")
	if err := batondriver.CheckKey(key); err != nil {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("No valid key in the request (?key=, 1 to %d bytes).", batondriver.MaxKeyLen))
		return "", "", false
	}
	return queue, key, true
}

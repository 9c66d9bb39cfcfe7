package batonui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/batonui"
)

func TestLocksPageListsKeysInUse(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, PageSize: 2})
	ctx := context.Background()
	var tokens []string
	for _, k := range []string{"sync:user:1", "sync:user:2", "sync:user:3"} {
		lease, err := e.locker.TryAcquire(ctx, k, &batonlock.AcquireOpts{NoHeartbeat: true, TTL: time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { _ = lease.Release(context.Background()) })
		tokens = append(tokens, lease.Token())
	}
	require.NoError(t, e.locker.SetLimit(ctx, "halted:key", 0))
	idle, err := e.locker.TryAcquire(ctx, "idle:key", nil)
	require.NoError(t, err)
	require.NoError(t, idle.Release(ctx))

	body := e.get("/locks", http.StatusOK)
	require.Contains(t, body, "Keys in use")
	require.Contains(t, body, `<form method="get" action="/locks" class="search">`, "the lookup box stays")
	require.Contains(t, body, `href="/locks?key=halted%3Akey"`)
	require.Contains(t, body, ">halted</span>")
	require.Contains(t, body, `href="/locks?key=sync%3Auser%3A1"`)
	require.NotContains(t, body, "sync:user:2")
	require.NotContains(t, body, "idle:key", "an idle key is listed")
	require.Contains(t, body, "1–2 of 4")
	require.Contains(t, body, `href="/locks?page=2"`)
	for _, tok := range tokens {
		require.NotContains(t, body, tok, "a holder's token is shown")
	}

	body = e.get("/locks?page=2", http.StatusOK)
	require.Contains(t, body, "sync:user:2")
	require.Contains(t, body, "sync:user:3")
	require.NotContains(t, body, "sync:user:1")
	require.NotContains(t, body, "Next →")

	body = e.get("/locks?page=3", http.StatusOK)
	require.Contains(t, body, "No lock keys in use on this page")

	// A lookup shows the key and the list alike.
	body = e.get("/locks?key=idle:key", http.StatusOK)
	require.Contains(t, body, `<h3 class="mono">idle:key</h3>`)
	require.Contains(t, body, "sync:user:1")

	e.get("/locks?page=0", http.StatusBadRequest)
}

func TestLocksPageEmpty(t *testing.T) {
	e := setup(t, nil)
	body := e.get("/locks", http.StatusOK)
	require.Contains(t, body, "No lock keys in use:")
}

// unlistable is a backend whose listing fails.
type unlistable struct{ batondriver.LockDriver }

func (unlistable) LockList(context.Context, *batondriver.LockListParams) (*batondriver.LockListResult, error) {
	return nil, errors.New("index unavailable")
}

// A failed listing is shown on the page, whose lookup still serves.
func TestLocksPageListError(t *testing.T) {
	t.Parallel()
	d := batonmem.New()
	client, err := baton.NewClient(d, &baton.Config{Logger: quiet})
	require.NoError(t, err)
	locker, err := batonlock.New(unlistable{d}, nil)
	require.NoError(t, err)
	h, err := batonui.New(client, &batonui.Config{NoAuth: true, Locker: locker, Logger: quiet})
	require.NoError(t, err)
	lease, err := locker.TryAcquire(context.Background(), "k", &batonlock.AcquireOpts{NoHeartbeat: true, TTL: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = lease.Release(context.Background()) })

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/locks?key=k", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), "index unavailable")
	require.Contains(t, rec.Body.String(), "Lease ends")
}

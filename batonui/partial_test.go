package batonui_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonui"
)

// downQueue fails the stats of one queue, as a Cluster node that is down
// fails the queues on it.
type downQueue struct {
	*batonmem.Driver
	down string
}

func (d *downQueue) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	if p.Queue == d.down {
		return nil, errors.New("node down")
	}
	return d.Driver.QueueStats(ctx, p)
}

// TestPagesShowTheQueuesRead: a queue whose stats cannot be read leaves
// the overview and the dead set showing the others, with a warning that
// names it, not a 502 for all.
func TestPagesShowTheQueuesRead(t *testing.T) {
	t.Parallel()
	d := &downQueue{Driver: batonmem.New(), down: "gone"}
	client, err := baton.NewClient(d, &baton.Config{Logger: quiet, AllowUnknownKinds: true})
	require.NoError(t, err)
	for _, q := range []string{"up", "gone"} {
		_, err := client.Insert(t.Context(), rawArgs{"k", map[string]any{}}, &baton.InsertOpts{Queue: q})
		require.NoError(t, err)
	}
	h, err := batonui.New(client, &batonui.Config{NoAuth: true, Logger: quiet})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, path := range []string{"/", "/dead"} {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, body)
		require.Contains(t, string(body), "Some queues could not be read", path)
		require.Contains(t, string(body), "node down", path)
		if path == "/" {
			require.Contains(t, string(body), `href="/queues/up"`, "the queue read is listed")
		}
	}
}

// TestWrongMethodIs405: an action asked for with GET, or a page with POST,
// is answered 405 with the method it takes, not "no such page".
func TestWrongMethodIs405(t *testing.T) {
	t.Parallel()
	client, err := baton.NewClient(batonmem.New(), &baton.Config{Logger: quiet})
	require.NoError(t, err)
	h, err := batonui.New(client, &batonui.Config{NoAuth: true, Writable: true, Logger: quiet})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodGet, "/queues/q/pause", http.MethodPost},
		{http.MethodGet, "/queues/q/jobs/X/retry", http.MethodPost},
		{http.MethodPost, "/dead", http.MethodGet},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, nil)
		require.NoError(t, err)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", c.method, c.path)
		require.Equal(t, c.allow, resp.Header.Get("Allow"), "%s %s", c.method, c.path)
	}
	resp, err := srv.Client().Get(srv.URL + "/nosuch")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

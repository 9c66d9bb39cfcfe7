package batonui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonui"
)

// The schedules page lists the schedules registered in the backend, then
// those given in Config.PeriodicJobs that are not registered.
func TestSchedulesPage(t *testing.T) {
	every, err := baton.Every(15 * time.Minute)
	require.NoError(t, err)
	sixAM, err := baton.Cron("0 6 * * *")
	require.NoError(t, err)
	job := func(time.Time) (baton.JobArgs, *baton.InsertOpts) { return rawArgs{kind: "sync"}, nil }
	e := setup(t, &batonui.Config{NoAuth: true, PeriodicJobs: []*baton.PeriodicJob{
		{Name: "fan-out", Schedule: every, Job: job},
		{Name: "morning", Schedule: sixAM, Job: job},
	}})
	ctx := context.Background()
	for _, p := range []batondriver.QueueScheduleParams{
		{Queue: "mail", Name: "fan-out", Spec: "every 15m0s", Kind: "sync"},
		{Queue: "reports", Name: "nightly", Spec: "0 3 * * *", Kind: "report"},
		{Queue: "reports", Name: "whim", Spec: "on a whim", Kind: "report"},
		{Queue: "reports", Name: "<script>alert(1)</script>", Kind: "report"},
	} {
		p.TTL = time.Hour
		require.NoError(t, e.driver.QueueScheduleRegister(ctx, &p))
	}
	e.insert("mail", "sync", nil)
	_, err = e.driver.JobInsert(ctx, &batondriver.JobInsertParams{
		Queue: "reports", Jobs: []*batondriver.JobInsert{{Kind: "report", Args: []byte(`{}`), MaxAttempts: 1}},
		Once: &batondriver.JobInsertOnce{Name: "nightly", Tick: time.Now().Add(-time.Hour)},
	})
	require.NoError(t, err)

	body := e.get("/schedules", http.StatusOK)
	registered, configured, ok := strings.Cut(body, "Given here, not registered yet")
	require.True(t, ok, body)
	for _, want := range []string{
		`<td>fan-out</td><td><a href="/queues/mail">mail</a></td><td>sync</td><td><code>every 15m0s</code></td><td><span class="muted">none yet</span></td>`,
		`<td>nightly</td><td><a href="/queues/reports">reports</a></td><td>report</td><td><code>0 3 * * *</code></td>`,
		"1h 0m ago", // nightly's last tick
		`<td>whim</td>`, ">unknown<",
		"&lt;script&gt;alert(1)&lt;/script&gt;", `<code>—</code>`,
	} {
		require.Contains(t, registered, want)
	}
	require.NotContains(t, body, "<script>alert")
	require.Contains(t, configured, `<td>morning</td><td><code>0 6 * * *</code></td>`)
	require.NotContains(t, configured, "fan-out", "a registered schedule is listed once")
}

func TestSchedulesPageEmpty(t *testing.T) {
	e := setup(t, nil)
	body := e.get("/schedules", http.StatusOK)
	require.Contains(t, body, "No schedules registered.")
	require.NotContains(t, body, "Given here")
}

// failingSchedules is a backend whose schedule listing fails.
type failingSchedules struct{ batondriver.JobDriver }

func (failingSchedules) QueueScheduleList(context.Context, *batondriver.QueueParams) (*batondriver.QueueScheduleListResult, error) {
	return nil, errors.New("connection refused")
}

func TestSchedulesPageBackendError(t *testing.T) {
	t.Parallel()
	d := batonmem.New()
	client, err := baton.NewClient(failingSchedules{d}, &baton.Config{Logger: quiet, AllowUnknownKinds: true})
	require.NoError(t, err)
	_, err = client.Insert(context.Background(), rawArgs{kind: "x"}, nil)
	require.NoError(t, err)
	h, err := batonui.New(client, &batonui.Config{NoAuth: true, Logger: quiet})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/schedules", nil))
	require.Equal(t, http.StatusBadGateway, rec.Code)
	require.Contains(t, rec.Body.String(), "connection refused")
}

package batonui_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonui"
)

type pingArgs struct{}

func (pingArgs) Kind() string { return "ping" }

// The processes page lists the live worker processes: a client started
// here, and one of another machine as its beat recorded it.
func TestProcessesPage(t *testing.T) {
	e := setup(t, &batonui.Config{NoAuth: true, BasePath: "/admin"})
	ctx := context.Background()
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[pingArgs](func(context.Context, *baton.Job[pingArgs]) error { return nil }), nil)
	c, err := baton.NewClient(e.driver, &baton.Config{Workers: workers, Logger: quiet, ProcessName: "billing", Concurrency: 20,
		Queues: []baton.QueueConfig{{Name: "critical", Weight: 6, MaxWorkers: 4}, {Name: "default", Weight: 3}}})
	require.NoError(t, err)
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	_, err = e.driver.ProcessBeat(ctx, &batondriver.ProcessBeatParams{ProcessRecord: batondriver.ProcessRecord{
		ID: "0123456789abcdef", Name: "<script>alert(1)</script>", Host: "web-2", PID: 77, Version: "v9.9.9",
		Queues: []batondriver.ProcessQueue{{Name: "mail", Weight: 1, MaxWorkers: 2}, {Name: "low", Weight: 1}}, StrictPriority: true,
		Concurrency: 5, Busy: 3, Stopping: true,
	}, TTL: time.Hour})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		list, err := e.client.ProcessList(ctx)
		return err == nil && len(list) == 2
	}, 5*time.Second, 5*time.Millisecond)

	body := e.get("/processes", http.StatusOK)
	host, err := os.Hostname()
	require.NoError(t, err)
	for _, want := range []string{
		`<a href="/admin/processes" aria-current="page">Processes</a>`,
		`<strong>2</strong> processes, <strong>3</strong> of 25 workers busy.`,
		`<td>` + host + `</td>`, `<td class="num mono">` + strconv.Itoa(os.Getpid()) + `</td>`, `<td>billing</td>`,
		`<span class="badge active">running</span>`, `<td class="num zero">0 / 20</td>`,
		`<a href="/admin/queues/critical">critical</a> <span class="muted" title="weight">6</span> <span class="tag" title="QueueConfig.MaxWorkers: at most this many of the process's workers run the queue's jobs at once">max 4</span>, <a href="/admin/queues/default">default</a> <span class="muted" title="weight">3</span></td>`,
		`<td>web-2</td>`, `<td class="num mono">77</td>`, `&lt;script&gt;alert(1)&lt;/script&gt;`,
		`>stopping</span>`, `<td class="num">3 / 5</td>`,
		`<a href="/admin/queues/mail">mail</a> <span class="tag"`, `>max 2</span> › <a href="/admin/queues/low">low</a></span>`,
		`<td class="mono">v9.9.9</td>`, `<td class="mono">0123456789abcdef</td>`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "<script>alert")
	require.Regexp(t, regexp.MustCompile(`<td class="mono">[0-9a-f]{16}</td>`), body, "the started client's ID")

	// ?queue=: the processes that work one queue; a queue page says who
	// works it, or that nobody does.
	body = e.get("/processes?queue=mail", http.StatusOK)
	require.Contains(t, body, `<strong>1</strong> process, <strong>3</strong> of 5 workers busy.`)
	require.Contains(t, body, `<td>web-2</td>`)
	require.NotContains(t, body, "billing")
	require.Contains(t, body, `<a href="/admin/processes">All processes</a>`)
	require.Contains(t, e.get("/processes?queue=nobody", http.StatusOK), "No live process works nobody")
	e.get("/processes?queue=bad%20name", http.StatusBadRequest)
	_, err = e.client.Insert(ctx, pingArgs{}, &baton.InsertOpts{Queue: "orphans"})
	require.NoError(t, err)
	require.Contains(t, e.get("/queues/orphans", http.StatusOK), "<strong>No live process works this queue</strong>")
	require.Contains(t, e.get("/queues/critical", http.StatusOK),
		`Worked by <a href="/admin/processes?queue=critical">1 live process</a>, 0 of its 20 workers busy.`)

	// Stopped, the client is gone from the page at once.
	require.NoError(t, c.Stop(ctx))
	body = e.get("/processes", http.StatusOK)
	require.Contains(t, body, `<strong>1</strong> process, <strong>3</strong> of 5 workers busy.`)
	require.NotContains(t, body, "billing")
}

func TestProcessesPageEmpty(t *testing.T) {
	e := setup(t, nil)
	body := e.get("/processes", http.StatusOK)
	require.Contains(t, body, "No live processes")
	require.Contains(t, e.get("/", http.StatusOK), `<a href="/processes">Processes</a>`, "in the menu of every page")
}

// failingProcesses is a backend whose process listing fails.
type failingProcesses struct{ batondriver.JobDriver }

func (failingProcesses) ProcessList(context.Context) (*batondriver.ProcessListResult, error) {
	return nil, errors.New("connection refused")
}

func TestProcessesPageBackendError(t *testing.T) {
	t.Parallel()
	client, err := baton.NewClient(failingProcesses{batonmem.New()}, &baton.Config{Logger: quiet})
	require.NoError(t, err)
	h, err := batonui.New(client, &batonui.Config{NoAuth: true, Logger: quiet})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/processes", nil))
	require.Equal(t, http.StatusBadGateway, rec.Code)
	require.Contains(t, rec.Body.String(), "connection refused")
}

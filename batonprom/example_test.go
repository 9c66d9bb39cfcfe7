package batonprom_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/batonprom"
)

// ReportArgs are the arguments of a job that builds a report.
type ReportArgs struct {
	Customer string `json:"customer"`
}

func (ReportArgs) Kind() string { return "report" }

// Metrics for a client and a locker, served on /metrics beside the rest of
// a program's handlers.
func Example() {
	m, err := batonprom.New(nil)
	if err != nil {
		panic(err)
	}
	driver := batonmem.New() // in production: batonredis.New(rueidisClient, nil)

	done := make(chan struct{})
	workers := baton.NewWorkers()
	baton.AddWorker(workers, baton.WorkFunc[ReportArgs](func(ctx context.Context, job *baton.Job[ReportArgs]) error {
		close(done)
		return nil
	}), nil)
	client, err := baton.NewClient(driver, &baton.Config{
		Workers:          workers,
		OnJobEnd:         m.OnJobEnd,                                   // jobs finished, run and wait times
		InsertMiddleware: []baton.InsertMiddleware{m.InsertMiddleware}, // inserts, drops by OnBusyDrop
		Logger:           quiet,
	})
	if err != nil {
		panic(err)
	}
	locker, err := batonlock.New(driver, &batonlock.Config{OnAcquire: m.OnAcquire, Logger: quiet})
	if err != nil {
		panic(err)
	}
	m.CollectQueues(client, "default") // queue state, read at each scrape

	reg := prometheus.NewRegistry() // or m.Register(nil): prometheus.DefaultRegisterer
	if err := m.Register(reg); err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux) // in a program: http.ListenAndServe(":9090", mux)
	defer srv.Close()

	ctx := context.Background()
	if err := client.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := client.Insert(ctx, ReportArgs{Customer: "acme"}, nil); err != nil {
		panic(err)
	}
	<-done
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		panic(err)
	}
	_, _ = locker.TryDo(ctx, "report:customer:acme", nil, func(ctx context.Context, lease *batonlock.Lease) error {
		_, err := locker.TryAcquire(ctx, "report:customer:acme", nil) // busy: not granted
		return err
	})

	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		for _, prefix := range []string{
			"baton_jobs_finished_total", "baton_jobs_inserted_total", "baton_job_run_seconds_count",
			`baton_lock_acquires_total{mode="try"`, `baton_queue_jobs{queue="default",state="completed"}`,
		} {
			if strings.HasPrefix(line, prefix) {
				fmt.Println(line)
			}
		}
	}
	// Output:
	// baton_job_run_seconds_count{kind="report",queue="default"} 1
	// baton_jobs_finished_total{kind="report",outcome="completed",queue="default"} 1
	// baton_jobs_inserted_total{kind="report",queue="default",status="inserted"} 1
	// baton_lock_acquires_total{mode="try",result="granted"} 1
	// baton_lock_acquires_total{mode="try",result="not_granted"} 1
	// baton_queue_jobs{queue="default",state="completed"} 1
}

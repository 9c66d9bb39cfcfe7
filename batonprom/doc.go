// Package batonprom exports Baton's metrics to Prometheus
// (github.com/prometheus/client_golang). Package baton does not import it:
// a program that does not use it does not compile Prometheus.
//
//	m, err := batonprom.New(nil)
//	client, err := baton.NewClient(driver, &baton.Config{
//		Workers:          workers,
//		OnJobEnd:         m.OnJobEnd,
//		InsertMiddleware: []baton.InsertMiddleware{m.InsertMiddleware},
//	})
//	locker, err := batonlock.New(driver, &batonlock.Config{OnAcquire: m.OnAcquire})
//	m.CollectQueues(client)  // queue state, read from the backend at each scrape
//	err = m.Register(nil)    // prometheus.DefaultRegisterer
//	mux.Handle("/metrics", promhttp.Handler())
//
// # Metrics
//
// Names are shown with the default namespace "baton" (Config.Namespace).
// Counted by this process, from the hooks:
//
//	baton_jobs_finished_total{queue,kind,outcome}  attempts run, by outcome: completed, retry,
//	                                               snooze, cancel, dead, again, lost
//	baton_job_run_seconds{queue,kind}              how long the handler ran (histogram)
//	baton_job_wait_seconds{queue,kind}             from runnable (RunAt) to started (histogram)
//	baton_jobs_inserted_total{queue,kind,status}   inserts, by status: inserted, dropped (by
//	                                               OnBusyDrop), duplicate, replaced, rejected
//	baton_lock_acquires_total{mode,result}         TryAcquire (mode "try") and Acquire ("wait")
//	                                               calls, result "granted" or "not_granted"
//	baton_lock_wait_seconds{mode,result}           how long those calls took (histogram)
//
// Read from the backend at each scrape, for the queues given to
// CollectQueues; these are the backend's figures, the same in every process
// that exports them, so aggregate them across instances with max, not sum:
//
//	baton_queue_jobs{queue,state}                  jobs by state, all eight: scheduled, parked,
//	                                               available, running, completed, cancelled,
//	                                               dead, dropped (those still retained)
//	baton_queue_paused{queue}                      1 if the queue is paused
//	baton_queue_active_keys{queue}                 concurrency keys with holders, parked jobs or
//	                                               a limit override
//	baton_queue_oldest_available_age_seconds{queue} how long the oldest available job has been
//	                                               runnable; 0 when none is
//	baton_jobs_dropped_total{queue}                jobs ever dropped by their key's on-busy policy
//	                                               (a counter kept by the backend)
//	baton_queue_scrape_errors_total                failed reads of queue state
//
// # Cardinality
//
// Labels take values from small sets fixed by the program: queue and kind
// names, outcomes, states. No metric is labelled by job ID or by
// concurrency or lock key, which are unbounded. Config.LockKeyLabel may add
// a "key" label to the lock metrics, mapped to a bounded set (KeyPrefix).
// Queue names come from CollectQueues's list, or from the backend's list of
// every queue that ever had a job when none is given: a program that makes
// queue names from data should list its queues.
//
// # Failures
//
// A scrape waits on the backend for at most Config.ScrapeTimeout, then
// reports the queues read so far; a backend that ignores its context's
// deadline is given a short grace and then left behind. A failed read of queue state leaves that queue's series out of the
// scrape, counts baton_queue_scrape_errors_total and logs a warning; the
// rest of the scrape is served. The package does not report it as a
// collection error because promhttp's default answer to one is a 500 for
// the whole page, which would hide every other metric while the backend is
// down.
package batonprom

package batonprom

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultJobBuckets are the buckets of the job run and wait histograms, in
// seconds: from 5ms to an hour, since jobs run from milliseconds to many
// minutes and parked jobs may wait for hours.
var DefaultJobBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// DefaultLockBuckets are the buckets of the lock wait histogram, in
// seconds: from 1ms (an uncontended acquire is one round trip) to 5 minutes.
var DefaultLockBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// Config configures Metrics. nil means the zero value: every default.
type Config struct {
	// Namespace prefixes every metric name: "baton" gives
	// baton_jobs_finished_total. Default "baton".
	Namespace string
	// ConstLabels are added to every metric, e.g. {"service": "billing"}.
	// They must not be named like the metrics' own labels. Default none.
	ConstLabels prometheus.Labels

	// RunBuckets and WaitBuckets are the buckets, in seconds and strictly
	// increasing, of job_run_seconds and job_wait_seconds. Default
	// DefaultJobBuckets.
	RunBuckets  []float64
	WaitBuckets []float64
	// LockWaitBuckets are the buckets of lock_wait_seconds. Default
	// DefaultLockBuckets.
	LockWaitBuckets []float64

	// LockKeyLabel, if set, adds a label "key" to the lock metrics, valued
	// LockKeyLabel(key) for the lock's key. It must map the keys to a
	// small fixed set — KeyPrefix(2) maps "sync:user:42" to "sync:user" —
	// since every value is a series for as long as the process lives.
	// Default nil: no key label.
	LockKeyLabel func(key string) string

	// ScrapeTimeout bounds reading queue state at each scrape; a scrape
	// that runs out reports the queues read so far and counts an error.
	// Default 5s.
	ScrapeTimeout time.Duration

	// Logger receives a warning when reading queue state fails. Default
	// slog.Default().
	Logger *slog.Logger
}

// Metrics holds Baton's Prometheus metrics. Feed it with its hooks
// (OnJobEnd, InsertMiddleware, OnAcquire), point it at clients with
// CollectQueues, and register it (Register, or as a prometheus.Collector).
// It is safe for concurrent use.
type Metrics struct {
	timeout time.Duration
	log     *slog.Logger
	keyOf   func(string) string

	finished *prometheus.CounterVec
	run      *prometheus.HistogramVec
	wait     *prometheus.HistogramVec
	inserted *prometheus.CounterVec
	acquires *prometheus.CounterVec
	lockWait *prometheus.HistogramVec

	queueJobs    *prometheus.Desc
	queuePaused  *prometheus.Desc
	queueKeys    *prometheus.Desc
	queueOldest  *prometheus.Desc
	dropped      *prometheus.Desc
	scrapeErrors prometheus.Counter

	mu      sync.Mutex
	sources []*queueSource
}

// New returns Metrics configured by cfg (nil for the defaults). It returns
// an error for a config Prometheus would refuse: invalid names or labels,
// buckets that do not increase.
func New(cfg *Config) (*Metrics, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.Namespace == "" {
		c.Namespace = "baton"
	}
	if c.ScrapeTimeout == 0 {
		c.ScrapeTimeout = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var errs []error
	if c.ScrapeTimeout < 0 {
		errs = append(errs, fmt.Errorf("batonprom: Config.ScrapeTimeout is negative (%v)", c.ScrapeTimeout))
	}
	buckets := func(b []float64, def []float64, name string) []float64 {
		if len(b) == 0 {
			return def
		}
		for i := 1; i < len(b); i++ {
			if b[i] <= b[i-1] {
				errs = append(errs, fmt.Errorf("batonprom: Config.%s are not strictly increasing: %v", name, b))
				return def
			}
		}
		return b
	}
	runBuckets := buckets(c.RunBuckets, DefaultJobBuckets, "RunBuckets")
	waitBuckets := buckets(c.WaitBuckets, DefaultJobBuckets, "WaitBuckets")
	lockBuckets := buckets(c.LockWaitBuckets, DefaultLockBuckets, "LockWaitBuckets")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	ns, cl := c.Namespace, c.ConstLabels
	name := func(n string) string { return prometheus.BuildFQName(ns, "", n) }
	lockLabels := []string{"mode", "result"}
	if c.LockKeyLabel != nil {
		lockLabels = append(lockLabels, "key")
	}
	m := &Metrics{
		timeout: c.ScrapeTimeout,
		log:     c.Logger,
		keyOf:   c.LockKeyLabel,
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("jobs_finished_total"), ConstLabels: cl,
			Help: "Job attempts run by this process, by outcome (completed, retry, snooze, cancel, dead, again, lost).",
		}, []string{"queue", "kind", "outcome"}),
		run: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name("job_run_seconds"), ConstLabels: cl, Buckets: runBuckets,
			Help: "How long job handlers ran in this process.",
		}, []string{"queue", "kind"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name("job_wait_seconds"), ConstLabels: cl, Buckets: waitBuckets,
			Help: "How long jobs started by this process waited from runnable (their RunAt) to their start.",
		}, []string{"queue", "kind"}),
		inserted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("jobs_inserted_total"), ConstLabels: cl,
			Help: "Jobs inserted by this process, by status (inserted, dropped, duplicate, replaced, rejected).",
		}, []string{"queue", "kind", "status"}),
		acquires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name("lock_acquires_total"), ConstLabels: cl,
			Help: "batonlock TryAcquire (mode try) and Acquire (mode wait) calls, by result (granted, not_granted).",
		}, lockLabels),
		lockWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: name("lock_wait_seconds"), ConstLabels: cl, Buckets: lockBuckets,
			Help: "How long batonlock TryAcquire (mode try) and Acquire (mode wait) calls took.",
		}, lockLabels),
		queueJobs: prometheus.NewDesc(name("queue_jobs"),
			"Jobs in the queue by state, read from the backend.", []string{"queue", "state"}, cl),
		queuePaused: prometheus.NewDesc(name("queue_paused"),
			"1 if the queue is paused, read from the backend.", []string{"queue"}, cl),
		queueKeys: prometheus.NewDesc(name("queue_active_keys"),
			"Concurrency keys of the queue with holders, parked jobs or a limit override, read from the backend.", []string{"queue"}, cl),
		queueOldest: prometheus.NewDesc(name("queue_oldest_available_age_seconds"),
			"How long the queue's oldest available job has been runnable; 0 when none is. Read from the backend.", []string{"queue"}, cl),
		dropped: prometheus.NewDesc(name("jobs_dropped_total"),
			"Jobs of the queue ever dropped by their concurrency key's on-busy policy, counted by the backend.", []string{"queue"}, cl),
		scrapeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name("queue_scrape_errors_total"), ConstLabels: cl,
			Help: "Failed reads of queue state from the backend during scrapes.",
		}),
	}
	if m.keyOf == nil {
		// Every combination from the start, so that rates work from the
		// first scrape on.
		for _, mode := range []string{"try", "wait"} {
			for _, result := range []string{"granted", "not_granted"} {
				m.acquires.WithLabelValues(mode, result)
			}
		}
	}
	// Prometheus checks names and labels when a collector is registered;
	// do it now, so that New, not Register, reports a bad config.
	if err := prometheus.NewPedanticRegistry().Register(m); err != nil {
		return nil, fmt.Errorf("batonprom: %w", err)
	}
	return m, nil
}

// Register registers m with reg; nil means prometheus.DefaultRegisterer.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	return reg.Register(m)
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.finished.Describe(ch)
	m.run.Describe(ch)
	m.wait.Describe(ch)
	m.inserted.Describe(ch)
	m.acquires.Describe(ch)
	m.lockWait.Describe(ch)
	ch <- m.queueJobs
	ch <- m.queuePaused
	ch <- m.queueKeys
	ch <- m.queueOldest
	ch <- m.dropped
	m.scrapeErrors.Describe(ch)
}

// Collect implements prometheus.Collector. It reads the state of the
// queues given to CollectQueues from the backend, for at most
// Config.ScrapeTimeout.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.finished.Collect(ch)
	m.run.Collect(ch)
	m.wait.Collect(ch)
	m.inserted.Collect(ch)
	m.acquires.Collect(ch)
	m.lockWait.Collect(ch)
	m.collectQueues(ch)
}

// KeyPrefix returns a Config.LockKeyLabel that keeps the first n
// colon-separated parts of a key: KeyPrefix(2) maps "sync:user:42" to
// "sync:user" and "ledger" to "ledger". n of 0 or less maps every key to "".
func KeyPrefix(n int) func(key string) string {
	return func(key string) string {
		parts := 0
		for i := 0; i < len(key); i++ {
			if key[i] == ':' {
				if parts++; parts == n {
					return key[:i]
				}
			}
		}
		if n <= 0 {
			return ""
		}
		return key
	}
}

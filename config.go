package baton

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/batondriver"
)

// QueueConfig is a queue a client works, with its share of the workers.
type QueueConfig struct {
	// Name is 1 to 128 bytes of A-Z a-z 0-9 _ . : - (NewClient refuses
	// others, and a queue listed twice).
	Name string
	// Weight is the queue's share of fetches relative to the other queues:
	// with critical 6, default 3 and low 1, critical is asked first six
	// times in ten. Default 1. Ignored with Config.StrictPriority.
	Weight int
	// MaxWorkers caps how many of this client's workers run the queue's
	// jobs at once (River's MaxWorkers, a Sidekiq capsule's concurrency):
	// once it has that many, the queue is not fetched from, and the other
	// queues get the free workers, whatever its weight or place in strict
	// priority; it is fetched from again as soon as one of them frees.
	// Each process counts its own workers: to bound a queue's jobs across
	// every process, give them a concurrency key. Default 0: no cap but
	// Config.Concurrency.
	MaxWorkers int
}

// defaultQueue is the queue of a job whose insert and kind name none,
// and the queue a client works when Config.Queues names none.
const defaultQueue = "default"

// Config configures a Client. nil means the zero value: an insert-only
// client with the defaults below.
type Config struct {
	// Workers are the kinds this client runs. nil: the client only inserts
	// and administers, and Start fails.
	Workers *Workers

	// Queues are worked by Start. Default: one queue "default".
	Queues []QueueConfig
	// StrictPriority makes the workers drain the queues in the order of
	// Queues: a queue is fetched from only when the ones before it have
	// nothing available (or cannot be reached: a queue whose fetches fail
	// is asked again after a back-off, and holds up no other).
	StrictPriority bool

	// Concurrency is how many jobs this process runs at once. Default 100.
	Concurrency int

	// LeaseTTL is how long a running job is leased to this process without
	// a heartbeat. A crashed process's jobs — and their concurrency slots —
	// come back after at most LeaseTTL (plus RecoverDelay). Default 30s;
	// at least 30ms.
	LeaseTTL time.Duration

	// HeartbeatInterval is how often running jobs' leases are renewed, each
	// to a full LeaseTTL. Default LeaseTTL/3; at most LeaseTTL/2, so that a
	// renewal has time to be answered before the worker stops trusting the
	// lease (a little before LeaseTTL). A handler that overruns its timeout by more than LeaseTTL
	// (it ignores its context) is no longer renewed: its lease, and its
	// key's slot, expire, and its late outcome is ignored — a hung job
	// cannot hold its key for ever.
	HeartbeatInterval time.Duration
	// RecoverDelay is how long after its lease expired a job runs again.
	// Default 0: at once.
	RecoverDelay time.Duration

	// JobTimeout bounds one attempt unless the kind sets its own. Default
	// 1 minute; negative: no timeout.
	JobTimeout time.Duration
	// MaxAttempts is the default for kinds that set none. Default 25.
	MaxAttempts int
	// Backoff is the delay before retry number attempt (1 after the first
	// failure) for kinds that set none. Default: exponential from 1s,
	// doubling, capped at 24h, with ±25% jitter.
	Backoff func(attempt int) time.Duration

	// CompletedRetention is how long completed jobs are kept. Default 24h;
	// negative: deleted at once. Jobs dropped by their key's OnBusyDrop are
	// kept as long (at least a millisecond), then swept by the workers'
	// fetches.
	CompletedRetention time.Duration

	// DeadRetention is how long jobs stay in the dead set (dead and
	// cancelled), for people to look at, retry or delete, before the
	// workers' fetches sweep them. Default 30 days; negative: kept until
	// retried or deleted.
	DeadRetention time.Duration

	// MaxArgsBytes bounds a job's encoded args; bigger inserts fail.
	// Default 1 MiB; negative is refused.
	MaxArgsBytes int

	// PollInterval is the safety net of fetching: an idle worker pool asks
	// its queues at least this often even if no insert woke it. New jobs
	// wake it at once. A pool whose workers are all busy (each finish hands
	// its worker the next job), or a queue with its whole MaxWorkers share,
	// still fetches, for no job, this often and when a scheduled job comes
	// due: only a fetch admits due jobs and takes back expired leases.
	// Default 1s; at least 1ms.
	PollInterval time.Duration

	// DisableChaining turns off chained jobs. By default, when a queue has
	// nothing else available, the next parked job of a running job's
	// concurrency key is leased behind it, and starts on the same worker
	// the moment the handler returns: a key's jobs follow one another
	// without a round trip to the backend between them. A client working
	// several queues follows a chain only while another of its workers is
	// free, so that a busy pool's other queues do not wait behind the key:
	// else the chained job goes back to wait for its promotion. The chained
	// job is leased in advance; lowering the key's limit or halting it
	// (SetLimit) sends it back to wait unless it has started, which it may
	// have if the job ahead returned as the change was made. With chaining
	// disabled, a halt stops every job not yet started at once, at the cost
	// of a round trip between a key's jobs. A client asks for chained jobs
	// of a queue only once it listens to the queue's notices.
	DisableChaining bool

	// AllowUnknownKinds lets a client with Workers insert kinds it has no
	// worker for (another process runs them). Default false: such an insert
	// is an error wrapping ErrUnknownKind. A client without Workers inserts
	// any kind. A job whose kind the fetching process has no worker for
	// (processes sharing a queue with different workers, a rolling deploy)
	// counts an attempt and is retried after Backoff, as a failure is, so
	// that a process with the worker can take it; it goes to the dead set,
	// with the reason, once its attempts are used up. Give every process
	// that works a queue a worker for every kind in it to avoid the wait.
	AllowUnknownKinds bool

	// PeriodicJobs are inserted on their schedules while the client runs,
	// each tick once across every process running them.
	PeriodicJobs []*PeriodicJob

	// WorkerMiddleware wraps every attempt, outermost first.
	WorkerMiddleware []WorkerMiddleware
	// InsertMiddleware wraps every insert call, outermost first.
	InsertMiddleware []InsertMiddleware

	// OnJobEnd, if set, is called after every attempt this client runs, in
	// the worker's goroutine, before its outcome is recorded: for metrics
	// and tracing (package batonprom uses it). It must be quick and must not
	// block.
	OnJobEnd func(*JobEvent)

	// ProcessName labels this process in the list of live processes
	// (Client.ProcessList, `baton processes`, the dashboard): the name of
	// the service or deployment, say. At most 128 bytes of valid UTF-8.
	// Default "": none; processes are told apart by host, PID and ID.
	ProcessName string
	// ProcessTTL is how long a started client stays in the list of live
	// processes after its last beat. It beats every ProcessTTL/3 — its
	// record renewed with its busy workers, read then: nothing is sent per
	// job — and removes its record when Stop returns. A process that
	// crashed, or cannot reach the backend, drops out ProcessTTL after its
	// last beat that arrived, by the backend's clock. A beat that fails is
	// logged and tried again at the next one; it never holds up jobs.
	// Default 30s (a beat every 10s); at least 30ms.
	ProcessTTL time.Duration

	// Logger receives the client's logs, with job attributes. Default
	// slog.Default().
	Logger *slog.Logger
}

// WorkerMiddleware wraps one attempt of a job: it calls next to run it (or
// returns without calling it) and may change the outcome it returns.
type WorkerMiddleware func(ctx context.Context, job *JobRow, next func(context.Context) error) error

// InsertMiddleware wraps one Insert or InsertMany call.
type InsertMiddleware func(ctx context.Context, jobs []*InsertManyParams, next func(context.Context) ([]*InsertResult, error)) ([]*InsertResult, error)

// config is a Config with defaults filled in and checked.
type config struct {
	Config
	weights []int
}

func newConfig(cfg *Config) (*config, error) {
	c := &config{}
	if cfg != nil {
		c.Config = *cfg
	}
	if len(c.Queues) == 0 {
		c.Queues = []QueueConfig{{Name: defaultQueue}}
	}
	seen := map[string]bool{}
	for _, q := range c.Queues {
		if err := checkQueue(q.Name); err != nil {
			return nil, fmt.Errorf("baton: Config.Queues: %w", err)
		}
		if seen[q.Name] {
			return nil, fmt.Errorf("baton: Config.Queues: queue %q listed twice", q.Name)
		}
		seen[q.Name] = true
		w := q.Weight
		if w == 0 {
			w = 1
		}
		if w < 0 {
			return nil, fmt.Errorf("baton: Config.Queues: queue %q has negative weight %d", q.Name, q.Weight)
		}
		if q.MaxWorkers < 0 {
			return nil, fmt.Errorf("baton: Config.Queues: queue %q has negative MaxWorkers %d", q.Name, q.MaxWorkers)
		}
		c.weights = append(c.weights, w)
	}
	var errs []error
	if err := checkPeriodic(c.PeriodicJobs); err != nil {
		errs = append(errs, err)
	}
	def := func(v *time.Duration, d time.Duration, name string) {
		if *v == 0 {
			*v = d
		}
		if *v < 0 {
			errs = append(errs, fmt.Errorf("baton: Config.%s is negative (%v)", name, *v))
		}
	}
	def(&c.LeaseTTL, 30*time.Second, "LeaseTTL")
	def(&c.PollInterval, time.Second, "PollInterval")
	if c.RecoverDelay < 0 {
		errs = append(errs, fmt.Errorf("baton: Config.RecoverDelay is negative (%v)", c.RecoverDelay))
	}
	if c.PollInterval > 0 && c.PollInterval < time.Millisecond {
		// A wait for inserts lasts a millisecond at least (JobWait).
		errs = append(errs, fmt.Errorf("baton: Config.PollInterval %v is shorter than 1ms", c.PollInterval))
	}
	if c.LeaseTTL < 30*time.Millisecond {
		errs = append(errs, fmt.Errorf("baton: Config.LeaseTTL %v is shorter than 30ms", c.LeaseTTL))
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseTTL / 3
	}
	if c.HeartbeatInterval < 0 || c.HeartbeatInterval > c.LeaseTTL/2 {
		errs = append(errs, fmt.Errorf("baton: Config.HeartbeatInterval %v must be positive and at most half of LeaseTTL (%v)",
			c.HeartbeatInterval, c.LeaseTTL))
	}
	if c.JobTimeout == 0 {
		c.JobTimeout = time.Minute
	}
	if c.CompletedRetention == 0 {
		c.CompletedRetention = 24 * time.Hour
	}
	if c.CompletedRetention < 0 {
		c.CompletedRetention = 0
	}
	if c.DeadRetention == 0 {
		c.DeadRetention = 30 * 24 * time.Hour
	}
	if c.DeadRetention < 0 {
		c.DeadRetention = 0 // the backend keeps them
	}
	if c.Concurrency == 0 {
		c.Concurrency = 100
	}
	if c.Concurrency < 0 {
		errs = append(errs, fmt.Errorf("baton: Config.Concurrency is negative (%d)", c.Concurrency))
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 25
	}
	if c.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("baton: Config.MaxAttempts is negative (%d)", c.MaxAttempts))
	}
	if c.MaxArgsBytes == 0 {
		c.MaxArgsBytes = 1 << 20
	}
	if c.MaxArgsBytes < 0 {
		errs = append(errs, fmt.Errorf("baton: Config.MaxArgsBytes is negative (%d)", c.MaxArgsBytes))
	}
	if c.Backoff == nil {
		c.Backoff = DefaultBackoff
	}
	def(&c.ProcessTTL, 30*time.Second, "ProcessTTL")
	if c.ProcessTTL > 0 && c.ProcessTTL < 30*time.Millisecond {
		errs = append(errs, fmt.Errorf("baton: Config.ProcessTTL %v is shorter than 30ms", c.ProcessTTL))
	}
	if len(c.ProcessName) > batondriver.MaxProcessNameLen || !utf8.ValidString(c.ProcessName) {
		errs = append(errs, fmt.Errorf("baton: Config.ProcessName %q must be at most %d bytes of valid UTF-8", c.ProcessName, batondriver.MaxProcessNameLen))
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, errors.Join(errs...)
}

// DefaultBackoff is the retry delay Baton uses unless configured: 1s before
// the first retry, doubling each time up to 24h, each delay jittered by
// ±25% (so 18h to 30h once doubling has stopped) so that jobs that failed
// together do not retry together. An attempt below 1 counts as 1.
func DefaultBackoff(attempt int) time.Duration {
	base := math.Min(math.Pow(2, float64(max(attempt, 1)-1)), float64(24*time.Hour/time.Second))
	jitter := 0.75 + rand.Float64()/2
	return time.Duration(base * jitter * float64(time.Second))
}

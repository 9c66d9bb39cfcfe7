package baton

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// Client inserts jobs, runs them (after Start) and administers queues. It
// is safe for concurrent use.
type Client struct {
	driver batondriver.JobDriver
	cfg    *config

	mu     sync.Mutex
	runner *runner // while started

	insertersMu sync.Mutex
	inserters   map[string]*queueInserter // group commit of single inserts, by queue
}

// NewClient returns a client on driver. It checks cfg but does not contact
// the backend.
func NewClient(driver batondriver.JobDriver, cfg *Config) (*Client, error) {
	if driver == nil {
		return nil, errors.New("baton: NewClient: nil driver")
	}
	c, err := newConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{driver: driver, cfg: c}, nil
}

// Insert adds one job. Its kind's worker settings and opts (nil for
// defaults) decide its queue, priority, schedule, attempts, concurrency key
// and uniqueness. Invalid args or options (an unknown kind aside, which is
// ErrUnknownKind) return an error wrapping batondriver.ErrBadParams that
// says what is wrong, and store nothing. A job refused by OnBusyFail
// returns ErrKeyBusy, one refused by UniqueReject ErrDuplicate with the
// twin in the result.
func (c *Client) Insert(ctx context.Context, args JobArgs, opts *InsertOpts) (*InsertResult, error) {
	res, err := c.InsertMany(ctx, []*InsertManyParams{{Args: args, Opts: opts}})
	if res == nil {
		return nil, err
	}
	return res[0], err
}

// InsertMany adds jobs, in one round trip per queue and thousand jobs.
// Concurrent single-job inserts into one queue are grouped into one backend
// call while another is in flight, so many goroutines inserting one job
// each cost the backend about what InsertMany does.
// Either every job is checked and inserted, or an error says which one is
// invalid and none is inserted; a backend error can leave some batches
// inserted. Jobs refused by their key's OnBusyFail or by UniqueReject do
// not stop the others: the results are returned with an error that joins
// one ErrKeyBusy or ErrDuplicate per refused job, naming its index.
func (c *Client) InsertMany(ctx context.Context, jobs []*InsertManyParams) ([]*InsertResult, error) {
	insert := c.insertMany
	for i := len(c.cfg.InsertMiddleware) - 1; i >= 0; i-- {
		mw, next := c.cfg.InsertMiddleware[i], insert
		insert = func(ctx context.Context, jobs []*InsertManyParams) ([]*InsertResult, error) {
			return mw(ctx, jobs, func(ctx context.Context) ([]*InsertResult, error) { return next(ctx, jobs) })
		}
	}
	return insert(ctx, jobs)
}

func (c *Client) insertMany(ctx context.Context, jobs []*InsertManyParams) ([]*InsertResult, error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	now := time.Now()
	if len(jobs) == 1 {
		// The most common call: grouped with other single inserts.
		queue, ins, err := c.prepare(jobs[0], now)
		if err != nil {
			return nil, fmt.Errorf("baton: insert: %w", err)
		}
		res, err := c.insertGrouped(ctx, queue, ins)
		if err != nil {
			return nil, err
		}
		out := []*InsertResult{res.InsertResult}
		return out, rejected(out, []*insertResult{res})
	}
	type placed struct {
		queue string
		index int // in that queue's batch
	}
	batches := map[string]*batondriver.JobInsertParams{}
	var order []string
	where := make([]placed, len(jobs))
	for i, j := range jobs {
		queue, ins, err := c.prepare(j, now)
		if err != nil {
			return nil, fmt.Errorf("baton: insert #%d: %w", i, err)
		}
		b := batches[queue]
		if b == nil {
			b = &batondriver.JobInsertParams{Queue: queue}
			batches[queue] = b
			order = append(order, queue)
		}
		where[i] = placed{queue, len(b.Jobs)}
		b.Jobs = append(b.Jobs, ins)
	}
	results := map[string][]*insertResult{}
	for _, queue := range order {
		r, err := c.insertBatches(ctx, queue, batches[queue].Jobs)
		if err != nil {
			return nil, err
		}
		results[queue] = r
	}
	out := make([]*InsertResult, len(jobs))
	all := make([]*insertResult, len(jobs))
	for i, p := range where {
		all[i] = results[p.queue][p.index]
		out[i] = all[i].InsertResult
	}
	return out, rejected(out, all)
}

// insertResult is an InsertResult with the backend's reason for a
// rejection.
type insertResult struct {
	*InsertResult
	reason string
	key    string // the job's concurrency key
}

// rejected is the error for the inserts in res that were refused, or nil:
// ErrKeyBusy or ErrDuplicate for one job, wrapped with the job's index
// when there are several.
func rejected(out []*InsertResult, res []*insertResult) error {
	var errs []error
	for i, r := range res {
		if r.Status != JobRejected {
			continue
		}
		err := fmt.Errorf("%w: key %q (OnBusyFail)", ErrKeyBusy, r.key)
		if r.Job != nil {
			err = fmt.Errorf("%w: %s", ErrDuplicate, r.reason)
		}
		if len(out) > 1 {
			err = fmt.Errorf("insert #%d: %w", i, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// maxInsertBatch is the most jobs sent to the backend in one insert.
const maxInsertBatch = 1000

// insertBatches inserts jobs into queue in batches of at most
// maxInsertBatch: one Redis script runs alone on its server, and a huge one
// would stall every other client of it.
func (c *Client) insertBatches(ctx context.Context, queue string, jobs []*batondriver.JobInsert) ([]*insertResult, error) {
	var out []*insertResult
	for len(jobs) > 0 {
		n := min(len(jobs), maxInsertBatch)
		res, err := c.driver.JobInsert(ctx, &batondriver.JobInsertParams{Queue: queue, Jobs: jobs[:n]})
		if err != nil {
			return nil, fmt.Errorf("baton: insert into %q: %w", queue, err)
		}
		for i, row := range res.Jobs {
			out = append(out, &insertResult{
				InsertResult: &InsertResult{Job: row, Status: res.Status[i]},
				reason:       res.Reason[i],
				key:          jobs[i].Key,
			})
		}
		jobs = jobs[n:]
	}
	return out, nil
}

// prepare validates one job and resolves its options.
func (c *Client) prepare(j *InsertManyParams, now time.Time) (string, *batondriver.JobInsert, error) {
	if j == nil || j.Args == nil {
		return "", nil, fmt.Errorf("%w: nil args", batondriver.ErrBadParams)
	}
	kind := j.Args.Kind()
	if err := checkKind(kind); err != nil {
		return "", nil, fmt.Errorf("%w: %w", batondriver.ErrBadParams, err)
	}
	var wopts WorkerOpts
	if c.cfg.Workers != nil {
		kw, ok := c.cfg.Workers.kinds[kind]
		switch {
		case ok:
			wopts = kw.opts
		case !c.cfg.AllowUnknownKinds:
			return "", nil, fmt.Errorf("%w %q: no worker registered (set Config.AllowUnknownKinds if another process runs it)", ErrUnknownKind, kind)
		}
	}
	o := InsertOpts{}
	if j.Opts != nil {
		o = *j.Opts
	}
	queue := cmp.Or(o.Queue, wopts.Queue, defaultQueue)
	if err := checkQueue(queue); err != nil {
		return "", nil, err
	}
	if o.Priority < 0 || o.Priority > batondriver.MaxPriority {
		return "", nil, fmt.Errorf("%w: kind %q: priority %d out of range 0..%d", batondriver.ErrBadParams, kind, o.Priority, batondriver.MaxPriority)
	}
	attempts := o.MaxAttempts
	if attempts == 0 {
		attempts = wopts.MaxAttempts
	}
	if attempts == 0 {
		attempts = c.cfg.MaxAttempts
	}
	if attempts < 0 {
		return "", nil, fmt.Errorf("%w: kind %q: negative MaxAttempts %d", batondriver.ErrBadParams, kind, o.MaxAttempts)
	}
	if o.Delay < 0 {
		return "", nil, fmt.Errorf("%w: kind %q: negative Delay %v", batondriver.ErrBadParams, kind, o.Delay)
	}
	runAt := o.RunAt
	if o.Delay > 0 {
		runAt = time.Time{} // the backend counts the delay on its clock
	}
	if len(o.Tags) > 16 {
		return "", nil, fmt.Errorf("%w: kind %q: %d tags, at most 16", batondriver.ErrBadParams, kind, len(o.Tags))
	}
	for _, t := range o.Tags {
		if t == "" || len(t) > 128 {
			return "", nil, fmt.Errorf("%w: kind %q: tag %q must have 1 to 128 bytes", batondriver.ErrBadParams, kind, t)
		}
	}
	if o.Metadata != nil && !json.Valid(o.Metadata) {
		return "", nil, fmt.Errorf("%w: kind %q: metadata is not valid JSON", batondriver.ErrBadParams, kind)
	}
	args, err := json.Marshal(j.Args)
	if err != nil {
		return "", nil, fmt.Errorf("%w: kind %q: encoding args: %w", batondriver.ErrBadParams, kind, err)
	}
	if len(args) > c.cfg.MaxArgsBytes {
		return "", nil, fmt.Errorf("%w: kind %q: args of %d bytes exceed Config.MaxArgsBytes (%d)", batondriver.ErrBadParams, kind, len(args), c.cfg.MaxArgsBytes)
	}
	ins := &batondriver.JobInsert{
		Kind: kind, Args: args, Priority: o.Priority, MaxAttempts: attempts,
		RunAt: runAt, Delay: o.Delay, Tags: o.Tags, Metadata: o.Metadata,
	}
	if cc := cmp.Or(o.Concurrency, wopts.Concurrency); cc != nil {
		if err := applyConcurrency(ins, cc, j.Args, args); err != nil {
			return "", nil, err
		}
	}
	if u := cmp.Or(o.Unique, wopts.Unique); u != nil {
		if err := applyUnique(ins, u, j.Args, args); err != nil {
			return "", nil, err
		}
	}
	if err := batondriver.CheckJobInsertKeys(ins); err != nil {
		return "", nil, fmt.Errorf("kind %q: %w", kind, err)
	}
	return queue, ins, nil
}

package batonredis

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/jobid"
)

// The job half of the driver. Every method is one round trip: one script
// (lua/job_*.lua) on the queue's slot, or one command. docs/redis-keys.md
// describes the keys, docs/job-states.md the transitions.

// JobInsert implements batondriver.JobDriver. The queue's name joins the
// set of queue names in the same round trip, not atomically: a name can be
// listed whose insert failed, which is harmless.
func (d *Driver) JobInsert(ctx context.Context, p *batondriver.JobInsertParams) (*batondriver.JobInsertResult, error) {
	const op = "insert into"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if p.Once != nil && (p.Once.Name == "" || p.Once.Tick.IsZero()) {
		// Checked before an insert of none returns: bad parameters are
		// refused whatever else the call holds (as in memory).
		return nil, jobErr(op, p.Queue, fmt.Errorf("%w: Once needs a Name and a Tick", batondriver.ErrBadParams))
	}
	if len(p.Jobs) == 0 {
		if err := ctx.Err(); err != nil { // as for JobFinish
			return nil, jobErr(op, p.Queue, err)
		}
		return &batondriver.JobInsertResult{Jobs: []*batondriver.JobRow{}, Status: []batondriver.JobInsertStatus{}, Reason: []string{}}, nil
	}
	ids := make([]string, len(p.Jobs))
	args := make([]string, 0, insertArgs*len(p.Jobs)+2)
	for i, j := range p.Jobs {
		if err := checkInsert(j); err != nil {
			return nil, jobErr(op, p.Queue, fmt.Errorf("job #%d: %w", i, err))
		}
		tags := ""
		if len(j.Tags) > 0 {
			b, err := json.Marshal(j.Tags)
			if err != nil {
				return nil, jobErr(op, p.Queue, err)
			}
			tags = string(b)
		}
		ids[i] = jobid.New()
		var limit, delay, ukey, scope, conflict string
		if j.Key != "" {
			limit, delay = itoa(j.Limit), ms(j.BusyDelay)
		}
		if u := j.Unique; u != nil {
			ukey, scope = u.Key, string(u.Scope)
			conflict = ms(u.Period) + ":" + string(cmp.Or(u.OnConflict, batondriver.UniqueReturnExisting))
		}
		args = append(args, ids[i], j.Kind, string(j.Args), itoa(j.Priority), itoa(j.MaxAttempts),
			tags, string(j.Metadata), dueArg(j.RunAt, j.Delay),
			j.Key, limit, string(onBusy(j)), delay, ukey, scope, conflict)
	}
	if p.Once != nil {
		args = append(args, p.Once.Name, strconv.FormatInt(p.Once.Tick.UnixMilli(), 10))
	}
	k := d.queueKeys(p.Queue)
	var f *jobFunc
	var keys []string
	if j := p.Jobs[0]; len(p.Jobs) == 1 && p.Once == nil && j.Key == "" && j.Unique == nil && j.Delay == 0 && runAtMS(j.RunAt) == 0 {
		// The most common insert, one job with neither concurrency key nor
		// unique key, due now: job_insert_one.lua, sent only what it reads.
		f, args = d.scripts.jobInsertOne, args[:insertOneArgs]
		keys = []string{k.keys[keyMeta], k.keys[keyAvailable], k.keys[keyWake], k.job(ids[0])}
	} else {
		f, keys = d.scripts.jobInsert, k.withJobs(ids...)
	}
	reply := d.insert(ctx, f, p.Queue, keys, args)
	var res *batondriver.JobInsertResult
	var err error
	if f == d.scripts.jobInsertOne {
		res, err = insertOneResult(p, ids[0], reply)
	} else {
		var arr []rueidis.RedisMessage
		if arr, err = reply.ToArray(); err == nil {
			res, err = insertResult(p, ids, arr)
		}
	}
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return res, nil
}

// insert runs f, job_insert or job_insert_one. The queue joins the set of
// queue names with this process's first insert into it, pipelined in the
// same round trip; later inserts skip it.
func (d *Driver) insert(ctx context.Context, f *jobFunc, queue string, keys, args []string) rueidis.RedisResult {
	c := d.client
	if _, registered := d.queuesSeen.Load(queue); registered {
		return f.Exec(ctx, c, keys, args)
	}
	sadd := c.B().Sadd().Key(d.queuesKey()).Member(queue).Build()
	var reply rueidis.RedisResult
	var added error
	if f.lib.useEval.Load() {
		// No functions: the script cannot be pipelined (it may need a
		// second send after NOSCRIPT); this once, two round trips.
		reply, added = f.Exec(ctx, c, keys, args), c.Do(ctx, sadd).Error()
	} else {
		res := c.DoMulti(ctx, f.call(c, keys, args), sadd)
		reply, added = res[0], res[1].Error()
		if missingFunction(reply.Error()) {
			reply = f.afterMissing(ctx, c, keys, args)
		}
		reply = afterTryAgain(ctx, reply, func() rueidis.RedisResult { return f.exec(ctx, c, keys, args) })
	}
	if reply.Error() == nil && added == nil {
		d.queuesSeen.Store(queue, struct{}{})
	}
	return reply
}

// insertArgs is the number of script arguments per job of job_insert.lua;
// job_insert_one.lua takes the first insertOneArgs of them.
const (
	insertArgs    = 15
	insertOneArgs = 7
)

// The codes job_insert.lua replies per job (lua/joblib.lua, job_insert.lua).
const (
	insertAvailable = iota
	insertScheduled
	insertParked
	insertDropped
	insertRefused
	insertDuplicate
	insertReplaced
	insertRejected
	insertUnreplaced // a queued twin of another kind or key
)

// insertOneResult converts job_insert_one.lua's reply, the server's time:
// the job is available.
func insertOneResult(p *batondriver.JobInsertParams, id string, reply rueidis.RedisResult) (*batondriver.JobInsertResult, error) {
	nowMS, err := reply.AsInt64()
	if err != nil {
		return nil, err
	}
	return &batondriver.JobInsertResult{
		Jobs:   []*batondriver.JobRow{insertedRow(p.Queue, id, p.Jobs[0], insertAvailable, time.UnixMilli(nowMS))},
		Status: []batondriver.JobInsertStatus{batondriver.JobInserted},
		Reason: []string{""},
	}, nil
}

// insertResult converts job_insert.lua's reply: the server's time, a code
// per job, then the rows of dropped jobs and twins.
func insertResult(p *batondriver.JobInsertParams, ids []string, arr []rueidis.RedisMessage) (*batondriver.JobInsertResult, error) {
	if p.Once != nil && len(arr) >= 2 { // job codes are never negative
		if skipped, _ := arr[1].AsInt64(); skipped == -1 {
			res := &batondriver.JobInsertResult{Jobs: []*batondriver.JobRow{}, Skipped: true}
			if len(arr) == 3 {
				last, _ := arr[2].AsInt64()
				res.LastTick = time.UnixMilli(last)
			}
			return res, nil
		}
	}
	if len(arr) < 1+len(p.Jobs) {
		return nil, fmt.Errorf("unexpected reply of %d elements", len(arr))
	}
	nowMS, err := arr[0].AsInt64()
	if err != nil {
		return nil, err
	}
	now := time.UnixMilli(nowMS)
	n := len(p.Jobs)
	out := &batondriver.JobInsertResult{
		Jobs:   make([]*batondriver.JobRow, n),
		Status: make([]batondriver.JobInsertStatus, n),
		Reason: make([]string, n),
	}
	tail := arr[1+n:]
	for i, j := range p.Jobs {
		code, err := arr[1+i].AsInt64()
		if err != nil {
			return nil, err
		}
		out.Status[i] = batondriver.JobInserted
		switch code {
		case insertAvailable, insertScheduled, insertParked:
			out.Jobs[i] = insertedRow(p.Queue, ids[i], j, code, now)
			continue
		case insertRefused:
			out.Status[i], out.Reason[i] = batondriver.JobRejected, "key busy"
			continue
		case insertDuplicate:
			out.Status[i] = batondriver.JobDuplicate
		case insertReplaced:
			out.Status[i] = batondriver.JobReplaced
		case insertRejected, insertUnreplaced:
			out.Status[i] = batondriver.JobRejected
		case insertDropped:
		default:
			return nil, fmt.Errorf("job #%d: unexpected code %d", i, code)
		}
		// Dropped jobs and twins are followed by their ID and fields.
		if len(tail) < 2 {
			return nil, fmt.Errorf("job #%d: reply lacks its row", i)
		}
		id, err := tail[0].ToString()
		if err != nil {
			return nil, err
		}
		row := &batondriver.JobRow{ID: id, Queue: p.Queue} // a period's twin may be gone
		if !tail[1].IsNil() {
			fields, err := tail[1].ToArray()
			if err != nil {
				return nil, err
			}
			if row, err = rowFrom(p.Queue, id, fields); err != nil {
				return nil, err
			}
		}
		switch code {
		case insertRejected:
			out.Reason[i] = fmt.Sprintf("duplicate of %s", id)
		case insertUnreplaced:
			out.Reason[i] = batondriver.NotReplaced(id, row.Kind, row.Key, j.Kind, j.Key)
		}
		out.Jobs[i], tail = row, tail[2:]
	}
	return out, nil
}

// insertedRow is the row of job j, stored as ID id with code at now,
// without reading it back.
func insertedRow(queue, id string, j *batondriver.JobInsert, code int64, now time.Time) *batondriver.JobRow {
	row := &batondriver.JobRow{
		ID:          id,
		Queue:       queue,
		Kind:        j.Kind,
		Args:        bytes.Clone(j.Args),
		Priority:    j.Priority,
		State:       batondriver.JobStateAvailable,
		MaxAttempts: j.MaxAttempts,
		Tags:        slices.Clone(j.Tags),
		Metadata:    bytes.Clone(j.Metadata),
		CreatedAt:   now,
		RunAt:       now,
	}
	if j.Key != "" {
		row.Key, row.Limit, row.OnBusy = j.Key, j.Limit, onBusy(j)
	}
	if j.Unique != nil {
		row.Unique, row.UniqueScope = j.Unique.Key, j.Unique.Scope
	}
	switch code {
	case insertScheduled:
		row.State = batondriver.JobStateScheduled
		if j.Delay > 0 {
			row.RunAt = now.Add(ceilMS(j.Delay))
		} else if at := runAtMS(j.RunAt); at > now.UnixMilli() {
			row.RunAt = time.UnixMilli(at)
		} else { // rescheduled: its key was busy
			row.RunAt = now.Add(j.BusyDelay.Truncate(time.Millisecond))
		}
	case insertParked:
		row.State, row.ParkedAt, row.OnBusy = batondriver.JobStateParked, now, batondriver.OnBusyWait
	case insertAvailable:
		if row.Key != "" {
			row.OnBusy = batondriver.OnBusyWait
		}
	}
	return row
}

// onBusy is j's on-busy policy, OnBusyWait by default.
func onBusy(j *batondriver.JobInsert) batondriver.OnBusy {
	if j.Key == "" {
		return ""
	}
	return cmp.Or(j.OnBusy, batondriver.OnBusyWait)
}

// dueArg is a script's run_at argument for a job due at runAt or, if delay
// is positive, delay after the server's clock reads as the script runs:
// "+" and the delay in ms, rounded up (see due_at in joblib.lua).
func dueArg(runAt time.Time, delay time.Duration) string {
	if delay > 0 {
		return "+" + strconv.FormatInt(ceilMS(delay).Milliseconds(), 10)
	}
	return strconv.FormatInt(runAtMS(runAt), 10)
}

// ceilMS is d rounded up to whole milliseconds.
func ceilMS(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		d += time.Millisecond - r
	}
	return d
}

// runAtMS is t in Unix ms for a script, rounded up so that a job never
// becomes due before its RunAt; 0 (now) for the zero time or a time before
// 1970.
func runAtMS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return max(ms, 0)
}

func checkInsert(j *batondriver.JobInsert) error {
	switch {
	case j == nil:
		return fmt.Errorf("%w: nil job", batondriver.ErrBadParams)
	case j.Kind == "":
		return fmt.Errorf("%w: empty kind", batondriver.ErrBadParams)
	case j.Priority < 0 || j.Priority > batondriver.MaxPriority:
		return fmt.Errorf("%w: priority %d out of range 0..%d", batondriver.ErrBadParams, j.Priority, batondriver.MaxPriority)
	case j.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts %d is less than 1", batondriver.ErrBadParams, j.MaxAttempts)
	}
	if err := batondriver.CheckDue(j.RunAt, j.Delay); err != nil {
		return err
	}
	return batondriver.CheckJobInsertKeys(j)
}

// JobFetch implements batondriver.JobDriver. The jobs' leases are 128
// random bits each, made here and handed to the script in one argument. If
// ctx has a deadline, the script leases nothing once the server's clock is
// past it, by the estimate in serverclock.go; the first fetch of a queue
// that asks for jobs is preceded by one that asks for none, to take the
// estimate's first sample.
func (d *Driver) JobFetch(ctx context.Context, p *batondriver.JobFetchParams) (*batondriver.JobFetchResult, error) {
	const op = "fetch from"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if p.Max < 0 || p.LeaseTTL < time.Millisecond || p.RecoverDelay < 0 || p.DeadRetention < 0 || p.DroppedRetention < 0 {
		return nil, jobErr(op, p.Queue, fmt.Errorf("%w: Max %d, LeaseTTL %v, RecoverDelay %v, DeadRetention %v, DroppedRetention %v",
			batondriver.ErrBadParams, p.Max, p.LeaseTTL, p.RecoverDelay, p.DeadRetention, p.DroppedRetention))
	}
	waits := d.clocks.deadline(ctx, p.Queue)
	var recovered int
	if _, ok := ctx.Deadline(); ok && waits == 0 && p.Max > 0 {
		// This process's first fetch from the queue: no clock sample yet.
		// One fetch that leases nothing (its upkeep done all the same)
		// takes one, so that even this fetch leases nothing once its
		// caller has given up.
		first := *p
		first.Max, first.Chain = 0, false
		res, err := d.JobFetch(ctx, &first)
		if err != nil {
			return nil, err
		}
		recovered = res.Recovered
		waits = d.clocks.deadline(ctx, p.Queue)
	}
	qk := d.queueKeys(p.Queue)
	call := d.leases.begin(qk.base, p.Queue, p.Max > 0)
	nonce, settle := call.args()
	args := []string{itoa(p.Max), ms(p.LeaseTTL), ms(p.RecoverDelay), newLeases(p.Max), ms(p.DeadRetention), ms(p.DroppedRetention),
		flag(p.Chain), strconv.FormatInt(waits, 10), nonce, settle}
	sent := time.Now()
	arr, err := d.scripts.jobFetch.Exec(ctx, d.client, call.keys(qk.keys), args).ToArray()
	if err == nil && (len(arr) < 6 || len(arr)%2 != 0) {
		err = fmt.Errorf("unexpected reply of %d elements", len(arr))
	}
	var unsettled []int64
	if err == nil {
		unsettled, err = arr[5].AsIntSlice()
	}
	// Whatever this call leased, its caller runs only if it returns no
	// error; else the jobs are given back by a later call.
	defer func() { d.leases.end(call, err, unsettled, waits, p.LeaseTTL) }()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	res := &batondriver.JobFetchResult{}
	if now, err := arr[0].AsInt64(); err == nil {
		// Refused as late: the script's own test, on the same two numbers.
		refused := waits > 0 && now > waits
		d.clocks.observe(p.Queue, sent, time.Now(), now, refused)
		res.Now = time.UnixMilli(now)
	}
	paused, _ := arr[1].AsInt64()
	n, _ := arr[2].AsInt64()
	more, _ := arr[4].AsInt64()
	res.Paused, res.Recovered, res.More = paused == 1, recovered+int(n), more == 1
	if next, err := arr[3].AsInt64(); err == nil {
		res.NextRunAt = time.UnixMilli(next)
	}
	if res.Jobs, err = rows(p.Queue, arr[6:]); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return res, nil
}

// leaseLen is the length of a lease: 128 random bits in base64url
// (LEASE_LEN in lua/joblib.lua).
const leaseLen = 22

// newLeases returns n fresh leases, one after the other.
func newLeases(n int) string {
	const size = 16
	b := make([]byte, size*n)
	_, _ = rand.Read(b) // never fails since Go 1.24
	out := make([]byte, leaseLen*n)
	for i := range n {
		base64.RawURLEncoding.Encode(out[i*leaseLen:], b[i*size:(i+1)*size])
	}
	return string(out)
}

// JobWait implements batondriver.JobDriver with BLPOP on the queue's wake
// list: each token pushed (one per job made available) wakes one waiter, and
// a token pushed while nobody waited is taken at once by the next call. A
// fetch that finds no job available deletes the list. Timeout must be at
// least 1ms.
func (d *Driver) JobWait(ctx context.Context, p *batondriver.JobWaitParams) error {
	const op = "wait on"
	if err := checkQueue(p.Queue); err != nil {
		return jobErr(op, p.Queue, err)
	}
	if p.Timeout < time.Millisecond {
		return jobErr(op, p.Queue, fmt.Errorf("%w: Timeout %v, must be at least 1ms", batondriver.ErrBadParams, p.Timeout))
	}
	timeout := p.Timeout
	c := d.client
	// UnblockOnCancel: a cancelled wait is ended with CLIENT UNBLOCK, so the
	// dedicated connection is kept rather than closed.
	cmd := c.B().Blpop().Key(d.queueKeys(p.Queue).keys[keyWake]).
		Timeout(float64(timeout.Milliseconds()) / 1000).Build().UnblockOnCancel()
	err := c.Do(ctx, cmd).Error()
	switch {
	case err == nil || rueidis.IsRedisNil(err):
		return nil
	case ctx.Err() != nil:
		return jobErr(op, p.Queue, ctx.Err())
	}
	return jobErr(op, p.Queue, err)
}

// JobExtend implements batondriver.JobDriver.
func (d *Driver) JobExtend(ctx context.Context, p *batondriver.JobExtendParams) (*batondriver.JobExtendResult, error) {
	const op = "extend in"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if p.TTL < time.Millisecond {
		return nil, jobErr(op, p.Queue, fmt.Errorf("%w: TTL %v", batondriver.ErrBadParams, p.TTL))
	}
	ids := make([]string, len(p.Leases))
	args := make([]string, 0, 1+2*len(p.Leases))
	args = append(args, ms(p.TTL))
	for i, l := range p.Leases {
		if l.ID == "" || l.Lease == "" {
			return nil, jobErr(op, p.Queue, fmt.Errorf("%w: lease #%d: empty ID or lease", batondriver.ErrBadParams, i))
		}
		ids[i] = l.ID
		args = append(args, l.ID, l.Lease)
	}
	arr, err := d.scripts.jobExtend.Exec(ctx, d.client, d.queueKeys(p.Queue).withJobs(ids...), args).ToArray()
	if err == nil && len(arr) != 3 {
		err = fmt.Errorf("unexpected reply of %d elements", len(arr))
	}
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	now, err := arr[0].AsInt64()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	res := &batondriver.JobExtendResult{Now: time.UnixMilli(now)}
	if res.Lost, err = leaseIDs(ids, arr[1]); err == nil {
		res.CancelRequested, err = leaseIDs(ids, arr[2])
	}
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return res, nil
}

// leaseIDs converts a reply's array of 1-based indexes into ids.
func leaseIDs(ids []string, m rueidis.RedisMessage) ([]string, error) {
	idx, err := m.AsIntSlice()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, i := range idx {
		if i < 1 || int(i) > len(ids) {
			return nil, fmt.Errorf("unexpected reply: lease #%d of %d", i, len(ids))
		}
		out = append(out, ids[i-1])
	}
	return out, nil
}

// JobFinish implements batondriver.JobDriver. If ctx has a deadline and the
// call may lease (Fetch or Chain), the script leases nothing once the
// server's clock is past it, as JobFetch does; the outcomes are recorded
// all the same. A finish with no outcomes and no Fetch only settles the
// queue's lost calls: with none, it sends nothing; with more than one call
// settles, it calls again until every call left has been tried.
func (d *Driver) JobFinish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	const op = "finish in"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if p.Retention < 0 {
		return nil, jobErr(op, p.Queue, fmt.Errorf("%w: Retention %v", batondriver.ErrBadParams, p.Retention))
	}
	if len(p.Finished) > 0 || p.Fetch != nil {
		return d.finish(ctx, p)
	}
	lost := d.leases.lostCalls(p.Queue)
	if lost == 0 {
		// Nothing to send; an ended ctx is reported all the same, as
		// every other call reports it.
		if err := ctx.Err(); err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		return &batondriver.JobFinishResult{}, nil
	}
	// Each call takes the oldest maxSettle lost calls, and those that may
	// still run go to the back: a call that settles none of them has not
	// looked at the rest yet. So stop only once the calls tried and left
	// unsettled number at least the calls left.
	tried := 0
	for {
		res, err := d.finish(ctx, p)
		left := d.leases.lostCalls(p.Queue)
		if err != nil || left == 0 {
			return res, err
		}
		tried += min(lost, maxSettle) - max(lost-left, 0)
		if tried >= left {
			return res, nil
		}
		lost = left
	}
}

// finish runs job_finish for JobFinish, which has checked the queue and
// the retention.
func (d *Driver) finish(ctx context.Context, p *batondriver.JobFinishParams) (*batondriver.JobFinishResult, error) {
	const op = "finish in"
	fetchMax, fetchTTL, leases := 0, time.Duration(0), ""
	if f := p.Fetch; f != nil {
		if f.Max < 1 || f.LeaseTTL < time.Millisecond {
			return nil, jobErr(op, p.Queue, fmt.Errorf("%w: Fetch.Max %d, Fetch.LeaseTTL %v", batondriver.ErrBadParams, f.Max, f.LeaseTTL))
		}
		fetchMax, fetchTTL, leases = f.Max, f.LeaseTTL, newLeases(f.Max)
	}
	ids := make([]string, len(p.Finished))
	var waits int64
	if p.Fetch != nil || p.Chain {
		waits = d.clocks.deadline(ctx, p.Queue)
	}
	qk := d.queueKeys(p.Queue)
	outcomes := make([]string, 0, 7*len(p.Finished))
	jobKeys := make([]string, len(p.Finished))
	for i, f := range p.Finished {
		if f == nil || f.ID == "" || f.Lease == "" {
			return nil, jobErr(op, p.Queue, fmt.Errorf("%w: outcome #%d: nil, or empty ID or lease", batondriver.ErrBadParams, i))
		}
		switch f.Outcome {
		case batondriver.JobOutcomeCompleted, batondriver.JobOutcomeRetry, batondriver.JobOutcomeSnooze,
			batondriver.JobOutcomeCancel, batondriver.JobOutcomeDead, batondriver.JobOutcomeAgain:
		default:
			return nil, jobErr(op, p.Queue, fmt.Errorf("%w: unknown outcome %q", batondriver.ErrBadParams, f.Outcome))
		}
		if err := batondriver.CheckFinish(f); err != nil {
			return nil, jobErr(op, p.Queue, fmt.Errorf("outcome #%d: %w", i, err))
		}
		ids[i] = f.ID
		how := flag(f.Unchain)
		if f.GiveBack {
			how = "2"
		}
		// The output has an argument of its own: an Again's error is
		// recorded when a cancel request turns it into a cancel.
		outcomes = append(outcomes, f.ID, f.Lease, string(f.Outcome), f.Error, dueArg(f.RunAt, f.Delay), how, string(f.Output))
		jobKeys[i] = qk.job(f.ID)
	}
	call := d.leases.begin(qk.base, p.Queue, p.Fetch != nil || p.Chain)
	nonce, settle := call.args()
	args := append([]string{ms(p.Retention), itoa(fetchMax), ms(fetchTTL), leases, flag(p.Chain),
		strconv.FormatInt(waits, 10), nonce, settle}, outcomes...)
	arr, err := d.scripts.jobFinish.Exec(ctx, d.client, call.keys(qk.keys, jobKeys...), args).ToArray()
	var res *batondriver.JobFinishResult
	var unsettled []int64
	if err == nil {
		res, unsettled, err = finishResult(p.Queue, ids, arr)
	}
	// As for JobFetch: jobs leased here are given back later if this call
	// returns an error.
	d.leases.end(call, err, unsettled, waits, fetchTTL)
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return res, nil
}

// finishResult converts job_finish.lua's reply for the outcomes of ids,
// and returns the indexes of the lost calls it left unsettled.
func finishResult(queue string, ids []string, arr []rueidis.RedisMessage) (*batondriver.JobFinishResult, []int64, error) {
	nStale := int64(-1)
	if len(arr) > 0 {
		nStale, _ = arr[0].AsInt64()
	}
	if nStale < 0 || int(nStale) > len(arr)-2 || (len(arr)-2-int(nStale))%2 != 0 {
		return nil, nil, fmt.Errorf("unexpected reply of %d elements", len(arr))
	}
	res := &batondriver.JobFinishResult{}
	for _, m := range arr[1 : 1+nStale] {
		i, err := m.AsInt64()
		if err != nil || i < 1 || int(i) > len(ids) {
			return nil, nil, fmt.Errorf("bad stale index in reply")
		}
		res.Stale = append(res.Stale, ids[i-1])
	}
	unsettled, err := arr[1+nStale].AsIntSlice()
	if err != nil {
		return nil, nil, err
	}
	if res.Jobs, err = rows(queue, arr[2+nStale:]); err != nil {
		return nil, nil, err
	}
	return res, unsettled, nil
}

// JobGet implements batondriver.JobDriver with one HMGET.
func (d *Driver) JobGet(ctx context.Context, p *batondriver.JobGetParams) (*batondriver.JobRow, error) {
	const op = "get from"
	if err := checkJob(p); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	c := d.client
	arr, err := c.Do(ctx, c.B().Hmget().Key(d.queueKeys(p.Queue).job(p.ID)).Field(adminFields...).Build()).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if len(arr) != len(adminFields) {
		return nil, jobErr(op, p.Queue, fmt.Errorf("unexpected reply of %d elements", len(arr)))
	}
	if arr[fieldState].IsNil() {
		return nil, jobErr(op, p.Queue, fmt.Errorf("%w: %q", batondriver.ErrJobNotFound, p.ID))
	}
	row, err := rowFrom(p.Queue, p.ID, arr)
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return row, nil
}

// JobList implements batondriver.JobDriver. Available and scheduled jobs
// are listed by RunAt, running ones by AttemptedAt, dead and cancelled ones
// by FinishedAt, completed ones by when they are deleted (by FinishedAt if
// every finish used the same Retention). A Limit of 0 means 100. Listing
// running jobs reads them all (there are as many as jobs being worked on);
// every other listing costs O(log n + Limit).
func (d *Driver) JobList(ctx context.Context, p *batondriver.JobListParams) (*batondriver.JobListResult, error) {
	const op = "list"
	if err := batondriver.CheckJobList(p); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	limit, _ := batondriver.PageSize(p.Limit, p.Offset)
	arr, err := d.scripts.jobList.Exec(ctx, d.client, d.queueKeys(p.Queue).keys,
		[]string{string(p.State), itoa(p.Offset), itoa(limit), p.Key}).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if len(arr) < 1 || (len(arr)-1)%2 != 0 {
		return nil, jobErr(op, p.Queue, fmt.Errorf("unexpected reply of %d elements", len(arr)))
	}
	total, _ := arr[0].AsInt64()
	res := &batondriver.JobListResult{Total: int(total)}
	if res.Jobs, err = rows(p.Queue, arr[1:]); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return res, nil
}

// JobRetry implements batondriver.JobDriver.
func (d *Driver) JobRetry(ctx context.Context, p *batondriver.JobGetParams) (*batondriver.JobRow, error) {
	const op = "retry in"
	if err := checkJob(p); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return d.jobAdmin(ctx, op, d.scripts.jobRetry, p.Queue, p.ID)
}

// JobCancel implements batondriver.JobDriver with job_cancel.lua.
func (d *Driver) JobCancel(ctx context.Context, p *batondriver.JobCancelParams) (*batondriver.JobRow, error) {
	const op = "cancel in"
	if err := batondriver.CheckJobCancel(p); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	return d.jobAdmin(ctx, op, d.scripts.jobCancel, p.Queue, p.ID, p.Reason, d.queueKeys(p.Queue).noticeChannel())
}

// jobAdmin runs f, an admin's transition of job id that replies {0, server
// ms, the job's fields} or a result code and the job's state, with the
// job's ID and args as its arguments, and returns the job.
func (d *Driver) jobAdmin(ctx context.Context, op string, f *jobFunc, queue, id string, args ...string) (*batondriver.JobRow, error) {
	k := d.queueKeys(queue)
	arr, err := f.Exec(ctx, d.client, k.withJobs(id), append([]string{id}, args...)).ToArray()
	if err == nil && len(arr) == 0 {
		err = errors.New("empty reply")
	}
	if err != nil {
		return nil, jobErr(op, queue, err)
	}
	code, _ := arr[0].AsInt64()
	if code != 0 {
		detail := ""
		if len(arr) > 1 {
			detail, _ = arr[1].ToString()
		}
		return nil, jobErr(op, queue, codeErr(code, id, detail))
	}
	if len(arr) != 3 {
		return nil, jobErr(op, queue, fmt.Errorf("unexpected reply of %d elements", len(arr)))
	}
	fields, err := arr[2].ToArray()
	if err != nil {
		return nil, jobErr(op, queue, err)
	}
	row, err := rowFrom(queue, id, fields)
	if err != nil {
		return nil, jobErr(op, queue, err)
	}
	return row, nil
}

// JobDelete implements batondriver.JobDriver.
func (d *Driver) JobDelete(ctx context.Context, p *batondriver.JobGetParams) error {
	const op = "delete from"
	if err := checkJob(p); err != nil {
		return jobErr(op, p.Queue, err)
	}
	k := d.queueKeys(p.Queue)
	code, err := d.scripts.jobDelete.Exec(ctx, d.client, k.withJobs(p.ID), []string{p.ID}).AsInt64()
	if err != nil {
		return jobErr(op, p.Queue, err)
	}
	if code != 0 {
		return jobErr(op, p.Queue, codeErr(code, p.ID, string(batondriver.JobStateRunning)))
	}
	return nil
}

// QueueStats implements batondriver.JobDriver.
func (d *Driver) QueueStats(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueStatsResult, error) {
	const op = "stats of"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	arr, err := d.scripts.jobStats.Exec(ctx, d.client, d.queueKeys(p.Queue).keys, nil).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if len(arr) != 12 {
		return nil, jobErr(op, p.Queue, fmt.Errorf("unexpected reply of %d elements", len(arr)))
	}
	n := make([]int64, 11)
	for i := range n {
		if n[i], err = arr[i].AsInt64(); err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
	}
	res := &batondriver.QueueStatsResult{
		Queue:  p.Queue,
		Paused: n[0] == 1,
		Counts: map[batondriver.JobState]int{
			batondriver.JobStateAvailable: int(n[1]),
			batondriver.JobStateScheduled: int(n[2]),
			batondriver.JobStateRunning:   int(n[3]),
			batondriver.JobStateCompleted: int(n[4]),
			batondriver.JobStateDead:      int(n[5]),
			batondriver.JobStateCancelled: int(n[6]),
			batondriver.JobStateParked:    int(n[7]),
			batondriver.JobStateDropped:   int(n[8]),
		},
		Keys:    int(n[9]),
		Dropped: n[10],
	}
	if oldest, err := arr[11].AsInt64(); err == nil {
		res.OldestAvailable = time.UnixMilli(oldest)
	}
	return res, nil
}

// QueueList implements batondriver.JobDriver: the names are sorted.
func (d *Driver) QueueList(ctx context.Context) ([]string, error) {
	c := d.client
	names, err := c.Do(ctx, c.B().Smembers().Key(d.queuesKey()).Build()).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("batonredis: list queues: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

// QueuePause implements batondriver.JobDriver. Resuming wakes one waiting
// fetcher per available job (at most 64).
func (d *Driver) QueuePause(ctx context.Context, p *batondriver.QueuePauseParams) error {
	op := "pause"
	if p.Resume {
		op = "resume"
	}
	if err := checkQueue(p.Queue); err != nil {
		return jobErr(op, p.Queue, err)
	}
	if err := d.scripts.jobPause.Exec(ctx, d.client, d.queueKeys(p.Queue).keys, []string{flag(!p.Resume)}).Error(); err != nil {
		return jobErr(op, p.Queue, err)
	}
	return nil
}

// checkJob validates the queue and ID naming one job.
func checkJob(p *batondriver.JobGetParams) error {
	if err := checkQueue(p.Queue); err != nil {
		return err
	}
	if p.ID == "" {
		return fmt.Errorf("%w: empty job ID", batondriver.ErrBadParams)
	}
	return nil
}

// jobErr wraps an error of operation op on queue.
func jobErr(op, queue string, err error) error {
	return fmt.Errorf("batonredis: %s %q: %w", op, queue, err)
}

// The result codes of scripts about one job (lua/joblib.lua).
const (
	codeNotFound       = -1
	codeNotRetryable   = -2
	codeRunning        = -3
	codeNotCancellable = -4
)

// codeErr maps a script's result code about job id, in state, to an error.
// It is the one place where result codes become errors.
func codeErr(code int64, id, state string) error {
	switch code {
	case codeNotFound:
		return fmt.Errorf("%w: %q", batondriver.ErrJobNotFound, id)
	case codeNotRetryable:
		return fmt.Errorf("%w: job %q is %s; only dead, cancelled, dropped, scheduled and available jobs can be retried",
			batondriver.ErrBadParams, id, state)
	case codeRunning:
		return fmt.Errorf("%w: job %q is running and cannot be deleted", batondriver.ErrBadParams, id)
	case codeNotCancellable:
		return batondriver.NotCancellable(id, batondriver.JobState(state))
	}
	return fmt.Errorf("unexpected result code %d", code)
}

// jobFields are a job hash's fields, in the order of F in lua/joblib.lua.
var jobFields = [...]string{"kind", "args", "prio", "state", "attempt", "max", "tags", "meta",
	"created", "run_at", "attempted", "finished", "errors", "lease", "lease_until",
	"key", "limit", "onbusy", "delay", "fence", "ukey", "uscope", "runs", "parked", "after", "cancel"}

// The positions of the fields in jobFields.
const (
	fieldKind = iota
	fieldArgs
	fieldPrio
	fieldState
	fieldAttempt
	fieldMax
	fieldTags
	fieldMeta
	fieldCreated
	fieldRunAt
	fieldAttempted
	fieldFinished
	fieldErrors
	fieldLease
	fieldLeaseUntil
	fieldKey
	fieldLimit
	fieldOnBusy
	fieldDelay
	fieldFence
	fieldUnique
	fieldUniqueScope
	fieldRuns
	fieldParked
	fieldAfter
	fieldCancel
)

// rows converts a reply of jobs, each an ID followed by the array of its
// fields.
func rows(queue string, arr []rueidis.RedisMessage) ([]*batondriver.JobRow, error) {
	if len(arr) == 0 {
		return nil, nil
	}
	out := make([]*batondriver.JobRow, 0, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		id, err := arr[i].ToString()
		if err != nil {
			return nil, err
		}
		fields, err := arr[i+1].ToArray()
		if err != nil {
			return nil, err
		}
		row, err := rowFrom(queue, id, fields)
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	return out, nil
}

// adminFields are jobFields and the output, which only JobGet and JobList
// read (the transitions' replies leave it out: job_list.lua reads it).
var adminFields = append(jobFields[:len(jobFields):len(jobFields)], "output")

// rowFrom converts the fields of job id, in the order of jobFields, or of
// adminFields.
func rowFrom(queue, id string, f []rueidis.RedisMessage) (*batondriver.JobRow, error) {
	if len(f) != len(jobFields) && len(f) != len(adminFields) {
		return nil, fmt.Errorf("job %q: %d fields, want %d or %d", id, len(f), len(jobFields), len(adminFields))
	}
	s := func(i int) string {
		v, _ := f[i].ToString() // "" for nil
		return v
	}
	n := func(i int) int {
		v, _ := strconv.Atoi(s(i))
		return v
	}
	t := func(i int) time.Time {
		v, err := strconv.ParseInt(s(i), 10, 64)
		if err != nil || v == 0 {
			return time.Time{}
		}
		return time.UnixMilli(v)
	}
	row := &batondriver.JobRow{
		ID:          id,
		Queue:       queue,
		Kind:        s(fieldKind),
		Priority:    n(fieldPrio),
		State:       batondriver.JobState(s(fieldState)),
		Attempt:     n(fieldAttempt),
		MaxAttempts: n(fieldMax),
		CreatedAt:   t(fieldCreated),
		RunAt:       t(fieldRunAt),
		AttemptedAt: t(fieldAttempted),
		FinishedAt:  t(fieldFinished),
		Lease:       s(fieldLease),
		LeaseUntil:  t(fieldLeaseUntil),
		Key:         s(fieldKey),
		Limit:       n(fieldLimit),
		OnBusy:      batondriver.OnBusy(s(fieldOnBusy)),
		Unique:      s(fieldUnique),
		UniqueScope: batondriver.UniqueScope(s(fieldUniqueScope)),
		Runs:        n(fieldRuns),
		ParkedAt:    t(fieldParked),
		After:       s(fieldAfter),

		CancelRequestedAt: t(fieldCancel),
	}
	row.Fence, _ = strconv.ParseInt(s(fieldFence), 10, 64)
	if len(f) == len(adminFields) {
		if v := s(len(jobFields)); v != "" {
			row.Output = []byte(v)
		}
	}
	if v := s(fieldArgs); v != "" {
		row.Args = []byte(v)
	}
	if v := s(fieldMeta); v != "" {
		row.Metadata = []byte(v)
	}
	if v := s(fieldTags); v != "" {
		if err := json.Unmarshal([]byte(v), &row.Tags); err != nil {
			return nil, fmt.Errorf("job %q: tags: %w", id, err)
		}
	}
	if v := s(fieldErrors); v != "" {
		var errs []struct {
			Attempt int    `json:"attempt"`
			At      int64  `json:"at"`
			Error   string `json:"error"`
		}
		if err := json.Unmarshal([]byte(v), &errs); err != nil {
			return nil, fmt.Errorf("job %q: errors: %w", id, err)
		}
		row.Errors = make([]batondriver.AttemptError, len(errs))
		for i, e := range errs {
			row.Errors[i] = batondriver.AttemptError{Attempt: e.Attempt, At: time.UnixMilli(e.At), Error: e.Error}
		}
	}
	return row, nil
}

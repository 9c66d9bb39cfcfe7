package batonmem

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// processRegistry is the registry of live processes
// (batondriver.ProcessDriver): one record per ID, dropped once expired by
// the next beat or listing.
type processRegistry struct {
	mu      sync.Mutex
	records map[string]*batondriver.Process // by ID
}

// ProcessBeat implements batondriver.ProcessDriver.
func (d *Driver) ProcessBeat(ctx context.Context, p *batondriver.ProcessBeatParams) (*batondriver.ProcessBeatResult, error) {
	if err := batondriver.CheckProcessBeat(p); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &d.procs
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.dropExpired(now)
	if r.records == nil {
		r.records = make(map[string]*batondriver.Process)
	}
	rec := &batondriver.Process{ProcessRecord: p.ProcessRecord, StartedAt: now, SeenAt: now, ExpiresAt: now.Add(p.TTL)}
	rec.Queues = slices.Clone(p.Queues) // the caller's slice may change
	old := r.records[p.ID]
	if old != nil {
		rec.StartedAt = old.StartedAt
	}
	r.records[p.ID] = rec
	return &batondriver.ProcessBeatResult{Created: old == nil, Now: now}, nil
}

// ProcessRemove implements batondriver.ProcessDriver.
func (d *Driver) ProcessRemove(ctx context.Context, p *batondriver.ProcessRemoveParams) error {
	if err := batondriver.CheckProcessRemove(p); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &d.procs
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, p.ID)
	return nil
}

// ProcessList implements batondriver.ProcessDriver.
func (d *Driver) ProcessList(ctx context.Context) (*batondriver.ProcessListResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &d.procs
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.dropExpired(now)
	res := &batondriver.ProcessListResult{Processes: make([]*batondriver.Process, 0, len(r.records)), Now: now}
	for _, rec := range r.records {
		c := *rec
		c.Queues = slices.Clone(rec.Queues)
		res.Processes = append(res.Processes, &c)
	}
	batondriver.SortProcesses(res.Processes)
	return res, nil
}

// dropExpired forgets the records that expired by now. r.mu must be held.
func (r *processRegistry) dropExpired(now time.Time) {
	maps.DeleteFunc(r.records, func(_ string, rec *batondriver.Process) bool {
		return !rec.ExpiresAt.After(now)
	})
}

package batonredis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// The registry of live worker processes lives in two keys of its own hash
// tag (keys.go): P:{processes}:expiry, a sorted set of process IDs by when
// their records expire, and P:{processes}:records, a hash of the records.
// lua/process_beat.lua, lua/process_remove.lua and lua/process_list.lua
// each take both, one round trip per call. A record is stored as
// "started|seen|json": the times the script sets, then the process's own
// fields (processJSON) as this file encodes them.

// processJSON is a record's own fields as stored.
type processJSON struct {
	Name        string             `json:"name,omitempty"`
	Host        string             `json:"host"`
	PID         int                `json:"pid"`
	Version     string             `json:"version,omitempty"`
	Queues      []processQueueJSON `json:"queues"`
	Strict      bool               `json:"strict,omitempty"`
	Concurrency int                `json:"concurrency"`
	Busy        int                `json:"busy"`
	Stopping    bool               `json:"stopping,omitempty"`
}

type processQueueJSON struct {
	Name       string `json:"name"`
	Weight     int    `json:"weight"`
	MaxWorkers int    `json:"max_workers,omitempty"`
}

// ProcessBeat implements batondriver.ProcessDriver.
func (d *Driver) ProcessBeat(ctx context.Context, p *batondriver.ProcessBeatParams) (*batondriver.ProcessBeatResult, error) {
	if err := batondriver.CheckProcessBeat(p); err != nil {
		return nil, err
	}
	rec := processJSON{
		Name: p.Name, Host: p.Host, PID: p.PID, Version: p.Version, Strict: p.StrictPriority,
		Concurrency: p.Concurrency, Busy: p.Busy, Stopping: p.Stopping,
	}
	if p.Queues != nil {
		rec.Queues = make([]processQueueJSON, len(p.Queues))
		for i, q := range p.Queues {
			rec.Queues[i] = processQueueJSON{Name: q.Name, Weight: q.Weight, MaxWorkers: q.MaxWorkers}
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("batonredis: beat of process %q: %w", p.ID, err)
	}
	v, err := d.scripts.processBeat.Exec(ctx, d.client, d.processKeys(), []string{p.ID, ms(p.TTL), string(b)}).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("batonredis: beat of process %q: %w", p.ID, err)
	}
	if len(v) != 2 {
		return nil, fmt.Errorf("batonredis: beat of process %q: unexpected reply %v", p.ID, v)
	}
	return &batondriver.ProcessBeatResult{Created: v[1] == 1, Now: time.UnixMilli(v[0])}, nil
}

// ProcessRemove implements batondriver.ProcessDriver.
func (d *Driver) ProcessRemove(ctx context.Context, p *batondriver.ProcessRemoveParams) error {
	if err := batondriver.CheckProcessRemove(p); err != nil {
		return err
	}
	if err := d.scripts.processRemove.Exec(ctx, d.client, d.processKeys(), []string{p.ID}).Error(); err != nil {
		return fmt.Errorf("batonredis: remove process %q: %w", p.ID, err)
	}
	return nil
}

// ProcessList implements batondriver.ProcessDriver.
func (d *Driver) ProcessList(ctx context.Context) (*batondriver.ProcessListResult, error) {
	arr, err := d.scripts.processList.Exec(ctx, d.client, d.processKeys(), nil).AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("batonredis: list processes: %w", err)
	}
	if len(arr)%3 != 1 {
		return nil, fmt.Errorf("batonredis: list processes: unexpected reply of %d elements", len(arr))
	}
	now, err := strconv.ParseInt(arr[0], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("batonredis: list processes: server time %q: %w", arr[0], err)
	}
	res := &batondriver.ProcessListResult{Processes: make([]*batondriver.Process, 0, len(arr)/3), Now: time.UnixMilli(now)}
	for i := 1; i < len(arr); i += 3 {
		p, err := decodeProcess(arr[i], arr[i+1], arr[i+2])
		if err != nil {
			return nil, fmt.Errorf("batonredis: list processes: %w", err)
		}
		res.Processes = append(res.Processes, p)
	}
	batondriver.SortProcesses(res.Processes)
	return res, nil
}

// decodeProcess is the process of ID id from its expiry and its record, as
// lua/process_list.lua replies them.
func decodeProcess(id, expiry, record string) (*batondriver.Process, error) {
	started, rest, ok1 := strings.Cut(record, "|")
	seen, raw, ok2 := strings.Cut(rest, "|")
	var rec processJSON
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("process %q: record %q lacks its times", id, record)
	}
	if err := json.Unmarshal([]byte(raw), &rec); err != nil {
		return nil, fmt.Errorf("process %q: %w", id, err)
	}
	p := &batondriver.Process{
		ProcessRecord: batondriver.ProcessRecord{
			ID: id, Name: rec.Name, Host: rec.Host, PID: rec.PID, Version: rec.Version,
			StrictPriority: rec.Strict, Concurrency: rec.Concurrency, Busy: rec.Busy, Stopping: rec.Stopping,
		},
		StartedAt: msTime(started), SeenAt: msTime(seen), ExpiresAt: msTime(expiry),
	}
	if rec.Queues != nil {
		p.Queues = make([]batondriver.ProcessQueue, len(rec.Queues))
		for i, q := range rec.Queues {
			p.Queues[i] = batondriver.ProcessQueue{Name: q.Name, Weight: q.Weight, MaxWorkers: q.MaxWorkers}
		}
	}
	return p, nil
}

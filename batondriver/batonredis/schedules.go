package batonredis

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// A queue's registered schedules live in its hash P:queue:{Q}:schedules,
// name -> JSON record (scheduleRecord), next to the last ticks in its meta
// hash: lua/schedule_register.lua and lua/schedule_list.lua, one round trip
// each.

// scheduleRecord is a schedule's record as lua/schedule_register.lua stores
// it: times are server ms in strings.
type scheduleRecord struct {
	Spec       string `json:"spec"`
	Kind       string `json:"kind"`
	Registered string `json:"registered"`
	Seen       string `json:"seen"`
	Expires    string `json:"expires"`
}

// QueueScheduleRegister implements batondriver.JobDriver.
func (d *Driver) QueueScheduleRegister(ctx context.Context, p *batondriver.QueueScheduleParams) error {
	const op = "register a schedule in"
	if err := checkQueue(p.Queue); err != nil {
		return jobErr(op, p.Queue, err)
	}
	if err := batondriver.CheckSchedule(p); err != nil {
		return jobErr(op, p.Queue, err)
	}
	args := []string{p.Name, p.Spec, p.Kind, ms(p.TTL)}
	err := d.scripts.scheduleRegister.Exec(ctx, d.client, d.queueKeys(p.Queue).withSchedules(), args).Error()
	if err != nil {
		return jobErr(op, p.Queue, err)
	}
	return nil
}

// QueueScheduleList implements batondriver.JobDriver.
func (d *Driver) QueueScheduleList(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueScheduleListResult, error) {
	const op = "list the schedules of"
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	arr, err := d.scripts.scheduleList.Exec(ctx, d.client, d.queueKeys(p.Queue).withSchedules(), nil).ToArray()
	if err != nil {
		return nil, jobErr(op, p.Queue, err)
	}
	if len(arr)%3 != 1 {
		return nil, jobErr(op, p.Queue, fmt.Errorf("unexpected reply of %d elements", len(arr)))
	}
	res := &batondriver.QueueScheduleListResult{Queue: p.Queue, Schedules: make([]*batondriver.QueueSchedule, 0, len(arr)/3)}
	for i := 1; i < len(arr); i += 3 {
		name, err := arr[i].ToString()
		if err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		raw, err := arr[i+1].ToString()
		if err != nil {
			return nil, jobErr(op, p.Queue, err)
		}
		var rec scheduleRecord
		if err := json.Unmarshal([]byte(raw), &rec); err != nil {
			return nil, jobErr(op, p.Queue, fmt.Errorf("schedule %q: %w", name, err))
		}
		s := &batondriver.QueueSchedule{
			Name: name, Spec: rec.Spec, Kind: rec.Kind,
			RegisteredAt: msTime(rec.Registered), SeenAt: msTime(rec.Seen), ExpiresAt: msTime(rec.Expires),
		}
		if tick, err := arr[i+2].ToString(); err == nil { // false (nil) if none
			s.LastTick = msTime(tick)
		}
		res.Schedules = append(res.Schedules, s)
	}
	slices.SortFunc(res.Schedules, func(a, b *batondriver.QueueSchedule) int { return strings.Compare(a.Name, b.Name) })
	return res, nil
}

// msTime is the time of server ms s, or zero if s is not a number.
func msTime(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}

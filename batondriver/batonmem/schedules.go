package batonmem

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// QueueScheduleRegister implements batondriver.JobDriver.
func (d *Driver) QueueScheduleRegister(ctx context.Context, p *batondriver.QueueScheduleParams) error {
	if err := checkQueue(p.Queue); err != nil {
		return err
	}
	if err := batondriver.CheckSchedule(p); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queue(p.Queue)
	now := time.Now()
	q.dropExpiredSchedules(now)
	if q.schedules == nil {
		q.schedules = make(map[string]*batondriver.QueueSchedule)
	}
	sc := q.schedules[p.Name]
	if sc == nil {
		sc = &batondriver.QueueSchedule{Name: p.Name, RegisteredAt: now}
		q.schedules[p.Name] = sc
	}
	sc.Spec = p.Spec
	if p.Kind != "" {
		sc.Kind = p.Kind
	}
	sc.SeenAt, sc.ExpiresAt = now, now.Add(p.TTL)
	return nil
}

// QueueScheduleList implements batondriver.JobDriver.
func (d *Driver) QueueScheduleList(ctx context.Context, p *batondriver.QueueParams) (*batondriver.QueueScheduleListResult, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res := &batondriver.QueueScheduleListResult{Queue: p.Queue, Schedules: []*batondriver.QueueSchedule{}}
	s := &d.jobs
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[p.Queue]
	if q == nil {
		return res, nil
	}
	q.dropExpiredSchedules(time.Now())
	for _, sc := range q.schedules {
		c := *sc
		c.LastTick = q.once[sc.Name]
		res.Schedules = append(res.Schedules, &c)
	}
	slices.SortFunc(res.Schedules, func(a, b *batondriver.QueueSchedule) int { return strings.Compare(a.Name, b.Name) })
	s.tidy(p.Queue, q)
	return res, nil
}

// dropExpiredSchedules forgets the registrations that expired by now.
// The store's mutex must be held.
func (q *queueState) dropExpiredSchedules(now time.Time) {
	maps.DeleteFunc(q.schedules, func(_ string, sc *batondriver.QueueSchedule) bool {
		return !sc.ExpiresAt.After(now)
	})
}

package baton

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonhq/baton/batondriver"
)

// The backend's registry of recurring schedules: a started client registers
// each of its Config.PeriodicJobs in the queue its jobs go to (the queue
// that remembers its ticks), so that ScheduleList, `baton schedules` and
// the dashboard can show them.
//
// A schedule's queue and kind are those of the job its Job func returns,
// and Job is called only at ticks (it may count them, or read what it
// inserts from elsewhere): so a client learns them at its schedule's first
// tick, or at Start from a registration already in the backend (one
// ScheduleList). A schedule that never fired is listed from its first
// tick on.

const (
	// scheduleTTL is how long a registration lasts unless renewed: a
	// schedule that no started client has renewed for a week is dropped.
	scheduleTTL = 7 * 24 * time.Hour
	// scheduleRefresh is how often a started client renews the
	// registrations of its schedules: their SeenAt is at most this old
	// while a client runs them.
	scheduleRefresh = 5 * time.Minute
	// registerTimeout bounds one registration, and findTimeout the search
	// for the existing ones at Start.
	registerTimeout = 5 * time.Second
	findTimeout     = 30 * time.Second
)

// ScheduleInfo is a recurring schedule as the backend knows it: registered
// by the started clients that run it.
type ScheduleInfo struct {
	Name string
	// Queue is where its jobs go and its ticks are remembered.
	Queue string
	// Spec says when it fires: "every 15m0s" (Every), a cron spec (Cron),
	// or the String of another Schedule that has one; else "".
	Spec string
	// Kind is the kind of the jobs it inserts.
	Kind string
	// LastTick is the last tick inserted, or zero if none was.
	LastTick time.Time
	// NextTick is the first tick after now by Spec (or by this client's own
	// schedule of that name and spec), or zero if Spec cannot be parsed.
	// It says when the schedule fires if a client runs it then.
	NextTick time.Time
	// RegisteredAt is when a client first registered it (since it was last
	// dropped), SeenAt when one last did, and ExpiresAt when it is dropped
	// unless one does again: a week after SeenAt. A started client renews
	// its schedules every 5 minutes, so an older SeenAt means that no
	// running client has the schedule.
	RegisteredAt time.Time
	SeenAt       time.Time
	ExpiresAt    time.Time
}

// ScheduleList returns the recurring schedules registered in every queue,
// by name (then queue: a schedule whose jobs moved to another queue is
// listed in both until the old registration expires).
func (c *Client) ScheduleList(ctx context.Context) ([]*ScheduleInfo, error) {
	queues, err := c.driver.QueueList(ctx)
	if err != nil {
		return nil, fmt.Errorf("baton: list schedules: %w", err)
	}
	now := time.Now()
	out := []*ScheduleInfo{}
	for _, q := range queues {
		res, err := c.driver.QueueScheduleList(ctx, &batondriver.QueueParams{Queue: q})
		if err != nil {
			return nil, fmt.Errorf("baton: list schedules of %q: %w", q, err)
		}
		for _, s := range res.Schedules {
			info := &ScheduleInfo{
				Name: s.Name, Queue: q, Spec: s.Spec, Kind: s.Kind, LastTick: s.LastTick,
				RegisteredAt: s.RegisteredAt, SeenAt: s.SeenAt, ExpiresAt: s.ExpiresAt,
			}
			if sch := c.scheduleOf(s.Name, s.Spec); sch != nil {
				info.NextTick = sch.Next(now)
			}
			out = append(out, info)
		}
	}
	slices.SortFunc(out, func(a, b *ScheduleInfo) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Queue, b.Queue))
	})
	return out, nil
}

// scheduleOf returns the schedule of spec: this client's own periodic job
// of that name if its spec is the same (a Schedule of the application's
// own), else spec parsed as Every's or Cron's, else nil.
func (c *Client) scheduleOf(name, spec string) Schedule {
	for _, p := range c.cfg.PeriodicJobs {
		if p.Name == name && scheduleSpec(p.Schedule) == spec {
			return p.Schedule
		}
	}
	if spec == "" {
		return nil
	}
	var s Schedule
	var err error
	if d, ok := strings.CutPrefix(spec, everyPrefix); ok {
		var period time.Duration
		if period, err = time.ParseDuration(d); err == nil {
			s, err = Every(period)
		}
	} else {
		s, err = Cron(spec)
	}
	if err != nil {
		return nil
	}
	return s
}

// scheduleSpec is how s is listed: its String if it has one, cut to the
// longest spec the backends keep.
func scheduleSpec(s Schedule) string {
	str, ok := s.(fmt.Stringer)
	if !ok {
		return ""
	}
	spec := str.String()
	if len(spec) > batondriver.MaxScheduleSpecLen {
		spec = strings.ToValidUTF8(spec[:batondriver.MaxScheduleSpecLen], "")
	}
	return spec
}

// registration is one schedule's registry entry as its goroutine keeps it.
type registration struct {
	name, spec  string
	queue, kind string // "" until known (see above)
	refresh     *time.Ticker
	found       <-chan struct{} // the search at Start ended; nil once read
}

// foundSchedules is the search at Start for this client's schedules'
// existing registrations: done is closed when byName is set.
type foundSchedules struct {
	done   chan struct{}
	byName map[string]*ScheduleInfo
}

// findSchedules starts the search for the registrations of the client's
// periodic jobs (one ScheduleList); nil if it has none. A failed search
// finds nothing: the schedules register at their next ticks.
func (r *runner) findSchedules() *foundSchedules {
	if len(r.cfg.PeriodicJobs) == 0 {
		return nil
	}
	f := &foundSchedules{done: make(chan struct{}), byName: map[string]*ScheduleInfo{}}
	r.loops.Add(1)
	go func() {
		defer r.loops.Done()
		defer close(f.done)
		ctx, cancel := context.WithTimeout(r.fetchCtx, findTimeout)
		defer cancel()
		all, err := r.c.ScheduleList(ctx)
		if err != nil {
			if r.fetchCtx.Err() == nil {
				r.log.Warn("baton: cannot find the periodic jobs' registrations; they register at their next ticks", "err", err)
			}
			return
		}
		for _, s := range all {
			if old := f.byName[s.Name]; old == nil || s.SeenAt.After(old.SeenAt) {
				f.byName[s.Name] = s
			}
		}
	}()
	return f
}

// newRegistration returns p's registration, with nothing known yet.
func (r *runner) newRegistration(p *PeriodicJob, found *foundSchedules) *registration {
	return &registration{
		name: p.Name, spec: scheduleSpec(p.Schedule),
		refresh: time.NewTicker(scheduleRefresh),
		found:   found.done,
	}
}

// waitTick waits for tick, meanwhile registering the schedule once its
// queue is found and renewing the registration; false if the client
// stops first.
func (r *runner) waitTick(reg *registration, found *foundSchedules, tick time.Time) bool {
	timer := time.NewTimer(time.Until(tick))
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			return true
		case <-r.fetchCtx.Done():
			return false
		case <-reg.found:
			reg.found = nil
			if s := found.byName[reg.name]; s != nil && reg.queue == "" {
				reg.queue, reg.kind = s.Queue, s.Kind
				r.register(reg)
			}
		case <-reg.refresh.C:
			r.register(reg)
		}
	}
}

// learn notes the queue and kind of a tick's job, registering the schedule
// at once if they are new.
func (r *runner) learn(reg *registration, queue, kind string) {
	if queue != reg.queue || kind != reg.kind {
		reg.queue, reg.kind = queue, kind
		r.register(reg)
	}
}

// register records the schedule in the backend, if its queue is known,
// giving up after registerTimeout. A failure is logged; the next refresh
// tries again.
func (r *runner) register(reg *registration) {
	if reg.queue == "" {
		return
	}
	ctx, cancel := context.WithTimeout(r.fetchCtx, registerTimeout)
	defer cancel()
	err := r.c.driver.QueueScheduleRegister(ctx, &batondriver.QueueScheduleParams{
		Queue: reg.queue, Name: reg.name, Spec: reg.spec, Kind: reg.kind, TTL: scheduleTTL,
	})
	if err != nil && r.fetchCtx.Err() == nil {
		r.log.Warn("baton: registering periodic job failed", "periodic_job", reg.name, "queue", reg.queue, "err", err)
	}
}

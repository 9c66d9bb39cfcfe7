package baton

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/batonhq/baton/batondriver"
)

// Schedule says when a periodic job fires. Every process must compute the
// same ticks from the same schedule, since a tick is fired once across all
// of them: the schedules made here depend only on the time they are given.
//
// A Schedule that is a fmt.Stringer is listed with its String as its spec
// (ScheduleList); those of Every and Cron are.
type Schedule interface {
	// Next returns the first tick strictly after t.
	Next(t time.Time) time.Time
}

// Every returns a schedule firing every d, at multiples of d since the Unix
// epoch (so every 15 minutes means :00, :15, :30 and :45), whenever the
// processes started. d must be at least 10ms.
func Every(d time.Duration) (Schedule, error) {
	if d < 10*time.Millisecond {
		return nil, fmt.Errorf("baton: Every(%v): the period must be at least 10ms", d)
	}
	return every(d), nil
}

type every time.Duration

func (e every) Next(t time.Time) time.Time {
	d := time.Duration(e)
	// Truncate counts periods from Go's zero time (1 January of year 1),
	// which is a whole number of periods before the Unix epoch only for
	// some (those that divide a day do; a week or 7 minutes do not): shift
	// by where the epoch falls in a period.
	off := unixEpoch.Sub(unixEpoch.Truncate(d))
	return t.Add(-off).Truncate(d).Add(off + d)
}

var unixEpoch = time.Unix(0, 0)

// String is "every " and the period, such as "every 15m0s": the spec the
// schedule is listed with (ScheduleList).
func (e every) String() string { return everyPrefix + time.Duration(e).String() }

const everyPrefix = "every "

// Cron parses a standard five-field cron expression (minute, hour, day of
// month, month, day of week), or a descriptor such as "@hourly", in UTC
// unless it starts with CRON_TZ=Zone. "@every d" ticks as Every(d) does, at
// multiples of d since the Unix epoch, with d cut to whole seconds (at
// least 1s). A bad spec is an error that says why, and so is one that
// matches no date in the next five years (such as 30 February).
//
// In a zone with daylight saving time, a spec that does not fire every
// hour fires at each of its times once a day, as cron does: a time the
// clock reads twice when it goes back fires the first time only, and a
// time it skips when it goes forward fires at the moment it does. A spec
// that fires every hour follows the clock: an hour read twice fires twice,
// an hour skipped does not fire.
func Cron(spec string) (Schedule, error) {
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("baton: cron spec %q: %w", spec, err)
	}
	if d, ok := s.(cron.ConstantDelaySchedule); ok {
		// cron's own counts from the time it is given, so that processes
		// started at different times would fire different ticks.
		s = every(d.Delay)
	}
	if s.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("baton: cron spec %q matches no date in the next five years", spec)
	}
	return cronSchedule{s, spec}, nil
}

type cronSchedule struct {
	cron.Schedule
	spec string
}

func (c cronSchedule) Next(t time.Time) time.Time {
	spec, ok := c.Schedule.(*cron.SpecSchedule)
	// cron reads a spec without CRON_TZ in the zone of the time it is
	// given: UTC here.
	if !ok || spec.Location == time.Local || spec.Location == time.UTC || spec.Hour&allHours == allHours {
		// No daylight saving time, or every hour (or every period): the
		// ticks follow the clock, which may show an hour twice or not at
		// all.
		return c.Schedule.Next(t.UTC())
	}
	// A spec of some hours of the day fires once a day at each of its
	// times as the clock reads them, as cron does across a change of
	// daylight saving time.
	for {
		next := c.Schedule.Next(t.UTC())
		if next.IsZero() {
			return next
		}
		if jump := skippedTick(spec, t, next); !jump.IsZero() {
			return jump // clocks went forward over a tick: it fires then
		}
		if !repeatedTime(spec.Location, next) {
			return next
		}
		t = next // clocks went back: that time was a tick already
	}
}

const allHours = 1<<24 - 1

// skippedTick returns the first moment in (t, next] at which clocks in
// spec's zone jumped forward over a time spec matches, else zero.
func skippedTick(spec *cron.SpecSchedule, t, next time.Time) time.Time {
	for z := t.In(spec.Location); ; {
		_, end := z.ZoneBounds() // the zone's next change, after z
		if end.IsZero() || end.After(next) {
			return time.Time{}
		}
		_, before := end.Add(-time.Nanosecond).Zone()
		_, after := end.Zone()
		if after > before {
			// The clock read the times [end's in before, +(after-before))
			// in no zone: does spec match one of them?
			old := *spec
			old.Location = time.FixedZone("", before)
			m := old.Next(end.Add(-time.Second))
			if !m.IsZero() && m.Before(end.Add(time.Duration(after-before)*time.Second)) {
				return end
			}
		}
		z = end
	}
}

// repeatedTime reports whether the clock in loc read the time it reads at
// t once before, in the zone before clocks went back.
func repeatedTime(loc *time.Location, t time.Time) bool {
	t = t.In(loc)
	start, _ := t.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, before := start.Add(-time.Nanosecond).Zone()
	_, now := t.Zone()
	return before > now && t.Sub(start) < time.Duration(before-now)*time.Second
}

// String is the spec as given to Cron.
func (c cronSchedule) String() string { return c.spec }

// PeriodicJob is a job inserted on a schedule (seed S3: every 15 minutes,
// fan out one job per user). Every started client with the job in its
// Config.PeriodicJobs takes part, and each tick is inserted exactly once
// across all of them.
//
// Catch-up: ticks that passed while no client was running are not made up
// for; the schedule resumes with the next tick. A tick a running client
// could not insert (the backend was unreachable) is retried until the
// next tick, then given up (logged at Warn with periodic_job and
// given_up_tick; the last try may have inserted it after all). A client
// that wakes for a tick only once the next one is due too (a stalled
// process) fires the latest tick due and leaves the ticks before it to
// the other clients; it logs them at Warn with the attributes
// periodic_job, skipped (how many), first_skipped and last_skipped. A
// client whose insert of a tick comes after another client inserted a
// later one (it was slow) logs it at Warn too, with periodic_job,
// late_tick and last_tick: so a tick no client inserted is never lost
// without a trace.
//
// Started clients register their schedules in the backend, with their
// specs, queues and kinds, for ScheduleList (and `baton schedules`) to
// list: from the first tick on, and at once when a client starts if the
// schedule was registered before. A schedule no running client has is
// dropped from the list a week later.
type PeriodicJob struct {
	// Name identifies the schedule across processes and restarts; ticks are
	// remembered under it (in the job's queue).
	Name     string
	Schedule Schedule
	// Job returns the job to insert at a tick, with its options (nil for
	// the defaults). The job's queue is where the tick is remembered.
	Job func(tick time.Time) (JobArgs, *InsertOpts)
}

func checkPeriodic(jobs []*PeriodicJob) error {
	seen := map[string]bool{}
	for i, p := range jobs {
		switch {
		case p == nil:
			return fmt.Errorf("baton: Config.PeriodicJobs[%d] is nil", i)
		case p.Name == "" || len(p.Name) > batondriver.MaxScheduleNameLen:
			return fmt.Errorf("baton: Config.PeriodicJobs[%d]: name %q must have 1 to %d bytes", i, p.Name, batondriver.MaxScheduleNameLen)
		case seen[p.Name]:
			return fmt.Errorf("baton: Config.PeriodicJobs: name %q used twice", p.Name)
		case p.Schedule == nil:
			return fmt.Errorf("baton: periodic job %q has no Schedule", p.Name)
		case p.Job == nil:
			return fmt.Errorf("baton: periodic job %q has no Job", p.Name)
		}
		seen[p.Name] = true
	}
	return nil
}

// schedule fires one periodic job until the client stops, and keeps it
// registered in the backend (schedule_registry.go).
func (r *runner) schedule(p *PeriodicJob, found *foundSchedules, started time.Time) {
	defer r.loops.Done()
	reg := r.newRegistration(p, found)
	defer reg.refresh.Stop()
	// The first tick after Start, not after this goroutine first ran: one
	// due in between is this client's to fire as well.
	now := started
	tick := nextTick(p.Schedule, now)
	for !tick.IsZero() {
		if !r.waitTick(reg, found, tick) {
			return
		}
		next := nextTick(p.Schedule, tick)
		// Woken after the next tick was due too (a stalled process, or a
		// slow insert of the tick before, as in an outage): this tick's
		// turn is over, and the latest tick due is fired instead.
		skipped, first, last := 0, tick, tick
		for now = time.Now(); !next.IsZero() && !next.After(now); next = nextTick(p.Schedule, next) {
			skipped++
			last, tick = tick, next
		}
		if skipped > 0 {
			r.log.Warn("baton: periodic job woke after later ticks were due: it fires the latest and skips the ones before (other processes may have fired them)",
				"periodic_job", p.Name, "skipped", skipped, "first_skipped", first, "last_skipped", last, "fires", tick)
		}
		r.fire(p, reg, tick, next)
		tick = next
	}
	r.log.Error("baton: periodic job's schedule has no next tick; it fires no more", "periodic_job", p.Name, "after", now)
}

// nextTick is s's first tick after t, or zero if it has none: a cron
// spec that matches no date (such as 30 February) gives the zero time, and
// a schedule whose next tick is not after t would never move on.
func nextTick(s Schedule, t time.Time) time.Time {
	next := s.Next(t)
	if !next.After(t) {
		return time.Time{}
	}
	return next
}

// fire inserts the job of one tick, once across every process, retrying
// until the next tick (zero: none, so until Stop). The job's queue and
// kind are the schedule's registration's.
func (r *runner) fire(p *PeriodicJob, reg *registration, tick, next time.Time) {
	log := r.log.With("periodic_job", p.Name, "tick", tick)
	args, opts := p.Job(tick)
	queue, ins, err := r.c.prepare(&InsertManyParams{Args: args, Opts: opts}, time.Now())
	if err != nil {
		log.Error("baton: periodic job cannot be inserted", "err", err)
		return
	}
	r.learn(reg, queue, ins.Kind)
	backoff := 50 * time.Millisecond
	for {
		ctx, cancel := r.fetchCtx, context.CancelFunc(func() {})
		if !next.IsZero() { // else the schedule's last tick: retried until Stop
			ctx, cancel = context.WithDeadline(r.fetchCtx, next)
		}
		res, err := r.c.driver.JobInsert(ctx, &batondriver.JobInsertParams{
			Queue: queue, Jobs: []*batondriver.JobInsert{ins},
			Once: &batondriver.JobInsertOnce{Name: p.Name, Tick: tick},
		})
		cancel()
		switch {
		case err == nil && res.Skipped && res.LastTick.After(tick):
			// Late: this tick was inserted before the later one, by
			// another process, or never will be. Said at Warn, so that
			// a tick none inserted leaves a trace.
			log.Warn("baton: periodic tick came late: a later tick was inserted first, so another process inserted this one before it or none did",
				"late_tick", tick, "last_tick", res.LastTick)
			return
		case err == nil && res.Skipped:
			log.Debug("baton: periodic tick fired by another process")
			return
		case err == nil:
			log.Info("baton: periodic job inserted", "job_id", res.Jobs[0].ID)
			return
		case errors.Is(err, context.DeadlineExceeded) || r.fetchCtx.Err() != nil:
			log.Warn("baton: periodic tick given up", "given_up_tick", tick, "err", err)
			return
		}
		log.Warn("baton: inserting periodic job failed; retrying", "err", err)
		select {
		case <-time.After(backoff):
		case <-r.fetchCtx.Done():
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

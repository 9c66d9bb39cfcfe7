// Package jobcheck checks histories of job executions recorded while worker
// processes were killed (the crash tests, crash_test.go and
// keycrash_test.go, plain and keyed jobs, on standalone Redis and on a
// Cluster) against what Baton promises of a job's lease
// (docs/job-states.md, "At least once"):
//
//   - every job ran, and its last run ended with its outcome recorded;
//   - a job runs again only after its run before was cut off, either by a
//     SIGKILL of its process before its outcome was recorded, or by its
//     lease being lost (a heartbeat late: the handler is told so with
//     ErrLeaseLost, or its outcome is found stale);
//   - a job's runs never overlap: the next starts only after the run
//     before was cut off (its process killed, or its handler returned).
//
// So a job run twice for any other reason fails: a lease taken back while
// its live holder ran on untold, a fetch that leased one job to two
// workers, an outcome recorded and then lost.
//
// Times are lockcheck.Now (CLOCK_MONOTONIC), which processes on one
// machine share, so the logs of the workers and the kill times of the test
// that killed them form one history.
//
// The check trusts each execution's Killed: the death of the process that
// ran it, not of another. Whoever builds a history must tell processes
// apart by something a later process cannot share, not by PID: a worker
// started after a kill may get the killed one's PID, and its runs would
// take the killed one's kill time and acknowledgements (the crash tests
// give each process a log file of its own).
package jobcheck

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Execution is one run of a job's handler.
type Execution struct {
	Job string
	// Process names the OS process that ran it, for messages only: a
	// number its history gives it (not its PID, which a later process may
	// get).
	Process int
	Start   int64 // lockcheck.Now when the handler started
	// End is when the handler returned; 0 if its process logged no end
	// (it was killed first).
	End int64
	// Lost reports that the run's lease was lost: its handler's context
	// ended with ErrLeaseLost, or the backend found its outcome stale. Its
	// outcome is not recorded and the job runs again, once the handler
	// has returned.
	Lost bool
	// Recorded reports that the backend acknowledged the run's outcome as
	// recorded (its lease still held). A kill between the recording and
	// the acknowledgement leaves it false.
	Recorded bool
	// Killed is when the run's process was dead, as its killer read
	// lockcheck.Now once the process was reaped after SIGKILL; 0 if it was
	// never killed. The run must start and end before it. (Not when the
	// signal was about to be sent: a process may log a start in between,
	// as it did in a make chaos run.)
	Killed int64
	// Signalled is when SIGKILL had been sent to the run's process, as its
	// killer read lockcheck.Now once kill(2) returned; 0 leaves Killed to
	// stand for it. From then on the process runs no code (no thread
	// with SIGKILL pending returns to user code, bar the microseconds an
	// interrupt takes to stop one running on another CPU), so a run it
	// had going was cut off then, and the job may run again after it.
	// Not after Killed: a killed process's teardown and its killer's own
	// delays on a loaded machine put Killed up to a second later (seen
	// on a Cluster crash run), and the job's lease, no longer renewed,
	// may have lapsed and the job run elsewhere in the meantime.
	Signalled int64
}

// Counts sums up a history that passed.
type Counts struct {
	Jobs, Executions int
	// Killed and Lost count the runs that a kill of their process, or the
	// loss of their lease, cut off: each explains one run more.
	Killed, Lost int
}

// Error lists the jobs whose runs the history does not explain.
type Error struct {
	// Jobs are the jobs in violation, in the order of the history's jobs.
	Jobs []string
	// Violations says, for at most 20 of them, what is wrong and lists the
	// job's runs.
	Violations []string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("jobcheck: %d jobs' runs not explained:\n  %s", len(e.Jobs), strings.Join(e.Violations, "\n  "))
	if more := len(e.Jobs) - len(e.Violations); more > 0 {
		s += fmt.Sprintf("\n  and %d more", more)
	}
	return s
}

// Check verifies the executions of jobs, the IDs of every job of the
// history. It returns the counts and nil, or an *Error.
func Check(jobs []string, execs []Execution) (Counts, error) {
	counts := Counts{Jobs: len(jobs), Executions: len(execs)}
	var origin int64 // times in messages count from the first start
	byJob := map[string][]Execution{}
	for i, e := range execs {
		if i == 0 || e.Start < origin {
			origin = e.Start
		}
		byJob[e.Job] = append(byJob[e.Job], e)
	}
	bad := &Error{}
	fail := func(job string, es []Execution, format string, args ...any) {
		bad.Jobs = append(bad.Jobs, job)
		if len(bad.Violations) < 20 {
			bad.Violations = append(bad.Violations,
				fmt.Sprintf("job %s: %s; its runs: %s", job, fmt.Sprintf(format, args...), describe(es, origin)))
		}
	}
	known := make(map[string]bool, len(jobs))
	for _, job := range jobs {
		known[job] = true
		es := byJob[job]
		slices.SortFunc(es, func(a, b Execution) int { return cmp.Compare(a.Start, b.Start) })
		if len(es) == 0 {
			fail(job, es, "never ran")
			continue
		}
		if why := checkJob(es, &counts); why != "" {
			fail(job, es, "%s", why)
		}
	}
	for job, es := range byJob {
		if !known[job] {
			fail(job, es, "not a job of the history")
		}
	}
	if len(bad.Jobs) == 0 {
		return counts, nil
	}
	return counts, bad
}

// checkJob checks one job's runs, in start order, and counts those cut
// off; it returns what is wrong, or "".
func checkJob(es []Execution, counts *Counts) string {
	killed, lost := 0, 0
	for i, e := range es {
		switch {
		case e.End != 0 && e.End < e.Start:
			return fmt.Sprintf("run %d ends before it starts", i+1)
		case e.Killed != 0 && e.Start >= e.Killed:
			return fmt.Sprintf("run %d starts after its process died", i+1)
		case e.Killed != 0 && e.End >= e.Killed:
			return fmt.Sprintf("run %d ends after its process died", i+1)
		}
		if i == len(es)-1 {
			switch {
			case e.End == 0:
				return "its last run did not end"
			case e.Lost:
				return "its last run lost its lease"
			case !e.Recorded && e.Killed == 0:
				// A kill after the run ended may have cut off the
				// acknowledgement of its outcome, not the outcome.
				return "its last run's outcome was not recorded"
			}
			continue
		}
		next := es[i+1]
		// The next run must start after stop: when run i's handler
		// returned, or when its process was signalled (its lease was
		// renewed until then, or it had been lost before).
		var stop int64
		switch {
		case e.Lost:
			stop = e.End
			lost++
		case e.Killed != 0 && !e.Recorded:
			// Cut off by the kill: while it ran, or before its outcome
			// was recorded (the lease is renewed until it is).
			stop = cmp.Or(e.Signalled, e.Killed)
			killed++
		case e.Recorded:
			return fmt.Sprintf("ran again (run %d) after run %d's outcome was recorded", i+2, i+1)
		default: // ended in a process never killed, its lease not lost
			return fmt.Sprintf("ran again (run %d) after run %d ended in a process never killed, its lease not lost", i+2, i+1)
		}
		if next.Start <= stop {
			return fmt.Sprintf("run %d started before run %d was cut off", i+2, i+1)
		}
	}
	counts.Killed += killed
	counts.Lost += lost
	return ""
}

// describe lists runs for a message, their times in milliseconds from
// origin.
func describe(es []Execution, origin int64) string {
	ms := func(t int64) string { return fmt.Sprintf("%.1fms", float64(t-origin)/1e6) }
	var parts []string
	for i, e := range es {
		s := fmt.Sprintf("%d. process %d from %s", i+1, e.Process, ms(e.Start))
		if e.End != 0 {
			s += " to " + ms(e.End)
		} else {
			s += ", no end"
		}
		if e.Lost {
			s += ", lease lost"
		}
		if e.Recorded {
			s += ", outcome recorded"
		}
		if e.Signalled != 0 {
			s += ", process signalled at " + ms(e.Signalled)
		}
		if e.Killed != 0 {
			s += ", process killed at " + ms(e.Killed)
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

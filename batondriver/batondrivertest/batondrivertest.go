// Package batondrivertest is the conformance suite every Baton backend must
// pass. A backend's tests call Exercise and ExerciseJobs with a constructor;
// the suite checks each atomic transition of batondriver.LockDriver and
// batondriver.JobDriver against the behaviour Baton relies on
// (docs/job-states.md for jobs). When that behaviour changes, this suite
// changes first.
package batondrivertest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/batonhq/baton/batondriver"
)

// Exercise runs the suite. newDriver is called once per test and may return
// drivers sharing one backend: every test uses keys of its own. Tests run in
// parallel. LockList lists a whole namespace, so each driver newDriver
// returns must have one of its own (a Redis prefix, a memory driver).
func Exercise(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) {
	t.Run("Lock", func(t *testing.T) { exerciseLocks(t, newDriver) })
	t.Run("LockList", func(t *testing.T) { exerciseLockList(t, newDriver) })
	t.Run("LockEndedContext", func(t *testing.T) { exerciseLockEndedContexts(t, newDriver) })
	t.Run("LockEndedContextBadParams", func(t *testing.T) { exerciseLockEndedContextBadParams(t, newDriver) })
}

// ExerciseJobs runs the job suite, with per-key concurrency and uniqueness
// (batondriver.KeyDriver, docs/concurrency.md). newDriver is called once per
// test and may return drivers sharing one backend: every test uses a queue
// of its own. ProcessList lists a whole namespace, so each driver newDriver
// returns must have one of its own (a Redis prefix, a memory driver).
// Tests run in parallel, use leases and delays of tens of milliseconds, and
// allow a backend's clock a second of difference from the test's.
func ExerciseJobs(t *testing.T, newDriver func(t *testing.T) batondriver.JobDriver) {
	t.Run("Job", func(t *testing.T) { exerciseJobs(t, newDriver) })
	t.Run("Key", func(t *testing.T) { exerciseKeys(t, newDriver) })
	t.Run("Chain", func(t *testing.T) { exerciseChains(t, newDriver) })
	t.Run("Notice", func(t *testing.T) { exerciseNotices(t, newDriver) })
	t.Run("Unique", func(t *testing.T) { exerciseUnique(t, newDriver) })
	t.Run("Cancel", func(t *testing.T) { exerciseCancel(t, newDriver) })
	t.Run("Schedule", func(t *testing.T) { exerciseSchedules(t, newDriver) })
	t.Run("Process", func(t *testing.T) { exerciseProcesses(t, newDriver) })
	t.Run("EndedContext", func(t *testing.T) { exerciseEndedContexts(t, newDriver) })
	t.Run("EndedContextBadParams", func(t *testing.T) { exerciseEndedContextBadParams(t, newDriver) })
	t.Run("Mutant", func(t *testing.T) { exerciseMutants(t, newDriver) })
}

// uniqueKey returns a key no other test uses, with odd bytes in it, so that
// every test also checks the key encoding.
func uniqueKey(t *testing.T) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return t.Name() + "{x}%|" + hex.EncodeToString(b)
}

// token returns a fresh random token.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

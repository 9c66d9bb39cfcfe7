// Package batondrivertest is the conformance suite every Baton backend must
// pass. A backend's tests call Exercise with a constructor; the suite checks
// each atomic transition of batondriver.LockDriver against the behaviour Baton
// relies on. When that behaviour changes, this suite changes first.
package batondrivertest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/batonhq/baton/batondriver"
)

// Exercise runs the suite. newDriver is called once per test and may return
// drivers sharing one backend: every test uses keys of its own. Tests run in
// parallel.
func Exercise(t *testing.T, newDriver func(t *testing.T) batondriver.LockDriver) {
	t.Run("Lock", func(t *testing.T) { exerciseLocks(t, newDriver) })
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

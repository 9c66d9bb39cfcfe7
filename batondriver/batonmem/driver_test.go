package batonmem_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/batondriver/batondrivertest"
	"github.com/batonhq/baton/batondriver/batonmem"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	t.Parallel()
	batondrivertest.Exercise(t, func(t *testing.T) batondriver.LockDriver { return batonmem.New() })
}

func TestJobConformance(t *testing.T) {
	t.Parallel()
	batondrivertest.ExerciseJobs(t, func(t *testing.T) batondriver.JobDriver { return batonmem.New() })
}

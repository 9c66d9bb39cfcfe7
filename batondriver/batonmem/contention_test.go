package batonmem_test

import (
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/batondriver/batonmem"
	"github.com/batonhq/baton/batonlock"
	"github.com/batonhq/baton/internal/lockcheck"
)

// TestContention: goroutines of two Lockers on one memory Driver contend on
// two mutexes and two semaphores of 3; the history must pass every checker
// of internal/lockcheck. (batonredis runs the same across processes.)
func TestContention(t *testing.T) {
	t.Parallel()
	d := batonmem.New()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	w := lockcheck.Workload{
		Keys: []lockcheck.Key{
			{Name: "mutex-a", Limit: 1}, {Name: "mutex-b", Limit: 1},
			{Name: "sem-c", Limit: 3}, {Name: "sem-d", Limit: 3},
		},
		Goroutines: 24, Duration: 3 * time.Second, MaxOps: 400, Seed: seed,
	}
	rec := lockcheck.NewRecorder(nil)
	var wg sync.WaitGroup
	for proc := range 2 {
		l, err := batonlock.New(d, nil)
		if err != nil {
			t.Fatal(err)
		}
		w := w
		w.Proc = proc
		wg.Go(func() {
			if err := w.Run(t.Context(), l, rec); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	h := rec.Events()
	s := lockcheck.Summarize(h)
	t.Log(s)
	if s.Grants < 200 || s.Queued == 0 || s.TryFailed == 0 {
		t.Errorf("too little contention to prove anything: %v", s)
	}
	if err := lockcheck.Check(h, nil); err != nil {
		t.Fatalf("%v\n%v", s, err)
	}
}

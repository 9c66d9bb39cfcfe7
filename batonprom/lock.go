package batonprom

import "github.com/batonhq/baton/batonlock"

// OnAcquire records one TryAcquire or Acquire call; set it as
// batonlock.Config.OnAcquire. It counts lock_acquires_total and observes
// lock_wait_seconds, with mode "try" or "wait" and result "granted" or
// "not_granted" (busy, cancelled, timed out or failed), and a "key" label
// only if Config.LockKeyLabel is set.
func (m *Metrics) OnAcquire(ev *batonlock.AcquireEvent) {
	mode, result := "try", "not_granted"
	if ev.Blocking {
		mode = "wait"
	}
	if ev.Granted {
		result = "granted"
	}
	labels := []string{mode, result}
	if m.keyOf != nil {
		labels = append(labels, label(m.keyOf(ev.Key)))
	}
	m.acquires.WithLabelValues(labels...).Inc()
	m.lockWait.WithLabelValues(labels...).Observe(ev.Took.Seconds())
}

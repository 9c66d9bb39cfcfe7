// Package queuenotice is the mailbox behind a batondriver.QueueListener,
// shared by the backends: the backend posts notices without ever blocking
// (it posts under its own locks, or from a Pub/Sub reader that must not
// stall), and the listener receives every one of them. Nothing is dropped:
// recalls of one key not yet received merge into one, with the highest
// fence, which recalls everything the others did; cancels of one job into
// one; rechecks into one.
package queuenotice

import (
	"sync"

	"github.com/batonhq/baton/batondriver"
)

// Mailbox is one listener's mailbox. It implements batondriver.QueueListener.
type Mailbox struct {
	out  chan batondriver.QueueNotice
	kick chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	closed  bool // nothing is posted or handed on once closed
	recheck bool
	fences  map[string]int64 // key -> highest fence posted, not yet handed on
	order   []string         // the keys of fences, first posted first
	cancels map[string]bool  // job IDs posted, not yet handed on
	corder  []string         // the IDs of cancels, first posted first
}

// New returns an open mailbox. Close stops it.
func New() *Mailbox {
	m := &Mailbox{
		out:     make(chan batondriver.QueueNotice),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		fences:  make(map[string]int64),
		cancels: make(map[string]bool),
	}
	go m.run()
	return m
}

// Post queues n. It never blocks. A closed mailbox drops it.
func (m *Mailbox) Post(n batondriver.QueueNotice) {
	m.mu.Lock()
	switch f, ok := m.fences[n.Key]; {
	case m.closed:
	case n.Recheck:
		m.recheck = true
	case n.Cancel != "":
		if !m.cancels[n.Cancel] {
			m.cancels[n.Cancel] = true
			m.corder = append(m.corder, n.Cancel)
		}
	case !ok:
		m.fences[n.Key] = n.Fence
		m.order = append(m.order, n.Key)
	case n.Fence > f:
		m.fences[n.Key] = n.Fence
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// C implements batondriver.QueueListener.
func (m *Mailbox) C() <-chan batondriver.QueueNotice { return m.out }

// Close implements batondriver.QueueListener. Notices posted after it are
// dropped, and none not yet taken is handed on (one taken as it closed may
// still be, to a receiver that reads on).
func (m *Mailbox) Close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	m.once.Do(func() { close(m.done) })
}

// run hands the posted notices on: a recheck first (it recalls all that the
// other recalls do), then cancels, then recalls.
func (m *Mailbox) run() {
	for {
		select {
		case <-m.kick:
		case <-m.done:
			return
		}
		for {
			n, ok := m.next()
			if !ok {
				break
			}
			select {
			case m.out <- n:
			case <-m.done:
				return
			}
		}
	}
}

// next takes the next notice to hand on, if any.
func (m *Mailbox) next() (batondriver.QueueNotice, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return batondriver.QueueNotice{}, false
	}
	if m.recheck {
		m.recheck = false
		return batondriver.QueueNotice{Recheck: true}, true
	}
	if len(m.corder) > 0 {
		id := m.corder[0]
		m.corder = m.corder[1:]
		delete(m.cancels, id)
		return batondriver.QueueNotice{Cancel: id}, true
	}
	if len(m.order) == 0 {
		return batondriver.QueueNotice{}, false
	}
	k := m.order[0]
	m.order = m.order[1:]
	f := m.fences[k]
	delete(m.fences, k)
	return batondriver.QueueNotice{Key: k, Fence: f}, true
}

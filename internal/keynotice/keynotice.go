// Package keynotice is the mailbox behind a batondriver.KeyListener, shared
// by the backends: the backend posts recalls without ever blocking (it
// posts under its own locks, or from a Pub/Sub reader that must not
// stall), and the listener receives every one of them. Nothing is dropped:
// recalls of one key not yet received merge into one, with the highest
// fence, which recalls everything the others did.
package keynotice

import (
	"sync"

	"github.com/batonhq/baton/batondriver"
)

// Mailbox is one listener's mailbox. It implements batondriver.KeyListener.
type Mailbox struct {
	out  chan batondriver.KeyNotice
	kick chan struct{}
	done chan struct{}
	once sync.Once

	mu      sync.Mutex
	recheck bool
	fences  map[string]int64 // key -> highest fence posted, not yet handed on
	order   []string         // the keys of fences, first posted first
}

// New returns an open mailbox. Close stops it.
func New() *Mailbox {
	m := &Mailbox{
		out:    make(chan batondriver.KeyNotice),
		kick:   make(chan struct{}, 1),
		done:   make(chan struct{}),
		fences: make(map[string]int64),
	}
	go m.run()
	return m
}

// Post queues n. It never blocks.
func (m *Mailbox) Post(n batondriver.KeyNotice) {
	m.mu.Lock()
	switch f, ok := m.fences[n.Key]; {
	case n.Recheck:
		m.recheck = true
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

// C implements batondriver.KeyListener.
func (m *Mailbox) C() <-chan batondriver.KeyNotice { return m.out }

// Close implements batondriver.KeyListener.
func (m *Mailbox) Close() { m.once.Do(func() { close(m.done) }) }

// Closed is closed once Close has been called.
func (m *Mailbox) Closed() <-chan struct{} { return m.done }

// run hands the posted notices on, a recheck first: it recalls all that the
// others do.
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
func (m *Mailbox) next() (batondriver.KeyNotice, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.recheck {
		m.recheck = false
		return batondriver.KeyNotice{Recheck: true}, true
	}
	if len(m.order) == 0 {
		return batondriver.KeyNotice{}, false
	}
	k := m.order[0]
	m.order = m.order[1:]
	f := m.fences[k]
	delete(m.fences, k)
	return batondriver.KeyNotice{Key: k, Fence: f}, true
}

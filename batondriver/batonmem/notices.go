package batonmem

import (
	"context"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/queuenotice"
)

// queueListener is a batondriver.QueueListener of one queue.
type queueListener struct {
	*queuenotice.Mailbox
	s     *jobStore
	queue string
}

// Close implements batondriver.QueueListener.
func (l *queueListener) Close() {
	l.s.mu.Lock()
	delete(l.s.listeners[l.queue], l)
	if len(l.s.listeners[l.queue]) == 0 {
		delete(l.s.listeners, l.queue)
	}
	l.s.mu.Unlock()
	l.Mailbox.Close()
}

// QueueListen implements batondriver.JobDriver.
func (d *Driver) QueueListen(ctx context.Context, p *batondriver.QueueParams) (batondriver.QueueListener, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &d.jobs
	l := &queueListener{Mailbox: queuenotice.New(), s: s, queue: p.Queue}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listeners == nil {
		s.listeners = make(map[string]map[*queueListener]struct{})
	}
	if s.listeners[p.Queue] == nil {
		s.listeners[p.Queue] = make(map[*queueListener]struct{})
	}
	s.listeners[p.Queue][l] = struct{}{}
	return l, nil
}

// notify posts n to every listener of queue. s.mu is held.
func (s *jobStore) notify(queue string, n batondriver.QueueNotice) {
	for l := range s.listeners[queue] {
		l.Post(n)
	}
}

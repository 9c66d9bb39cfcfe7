package batonredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/queuenotice"
)

// Grant notices travel on one shard channel per (lock key, driver instance):
// a release publishes only to the instances whose waiters it granted, and
// each instance hands the notice to the one waiting goroutine it names.
// Queue notices (recalls of chained jobs, cancels of running ones) travel
// on one shard channel per queue, to every listener of the queue. One subscription per channel serves every
// listener of this instance on it and lingers after the last one leaves,
// so a contended key is subscribed once.

// mailbox is one listener of a subscription.
type mailbox interface {
	// recheck tells the listener that notices may have been lost. It
	// never blocks. d.mu is held.
	recheck()
}

// subscription is this instance's subscription to one channel.
type subscription struct {
	d       *Driver
	channel string
	ctx     context.Context
	cancel  context.CancelFunc
	// deliver hands a published message to the listeners it is for; d.mu
	// is not held.
	deliver func(s *subscription, msg string)

	// Guarded by d.mu.
	listeners map[string]mailbox // by token (grants) or listener ID (queue notices)
	ready     chan struct{}      // closed at the first confirmation
	confirmed bool
	linger    *time.Timer
}

// listener is one waiting token's mailbox.
type listener struct {
	sub   *subscription
	token string
	ch    chan batondriver.LockNotice
}

func (l *listener) C() <-chan batondriver.LockNotice { return l.ch }

func (l *listener) Close() { l.sub.leave(l.token, l) }

func (l *listener) recheck() {
	select {
	case l.ch <- batondriver.LockNotice{Recheck: true}:
	default: // a notice is pending already; the listener will look
	}
}

// queueListener is one QueueListen listener of a queue.
type queueListener struct {
	*queuenotice.Mailbox
	sub *subscription
	id  string
}

func (l *queueListener) Close() {
	l.sub.leave(l.id, l)
	l.Mailbox.Close()
}

func (l *queueListener) recheck() { l.Post(batondriver.QueueNotice{Recheck: true}) }

// leave removes the listener mb, named id, from s, which lingers once it
// has none left.
func (s *subscription) leave(id string, mb mailbox) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.listeners[id] != mb {
		return
	}
	delete(s.listeners, id)
	if len(s.listeners) == 0 && !d.closed {
		s.linger = time.AfterFunc(d.linger, func() { d.dropIdle(s) })
	}
}

// LockListen implements batondriver.LockDriver. It returns once Redis has
// confirmed the subscription, so a grant published after it returns reaches
// the listener; or with an error once ctx ends or the driver is closed.
func (d *Driver) LockListen(ctx context.Context, p *batondriver.LockListenParams) (batondriver.LockListener, error) {
	if err := batondriver.CheckLockListen(p); err != nil {
		return nil, err
	}
	l := &listener{token: p.Token, ch: make(chan batondriver.LockNotice, 4)}
	s, err := d.listen(ctx, d.lockKeys(p.Key).channel+d.id, p.Token, l, deliverGrant)
	if err != nil {
		return nil, fmt.Errorf("batonredis: listen on %q: %w", p.Key, err)
	}
	l.sub = s
	return l, nil
}

// QueueListen implements batondriver.JobDriver. It returns once Redis has
// confirmed the subscription of the queue's notice channel, or with an
// error once ctx ends or the driver is closed. After a break in the
// subscription (a reconnect), the listener receives a Recheck.
func (d *Driver) QueueListen(ctx context.Context, p *batondriver.QueueParams) (batondriver.QueueListener, error) {
	if err := checkQueue(p.Queue); err != nil {
		return nil, jobErr("listen for notices in", p.Queue, err)
	}
	l := &queueListener{Mailbox: queuenotice.New(), id: strconv.FormatUint(d.noticeIDs.Add(1), 10)}
	s, err := d.listen(ctx, d.queueKeys(p.Queue).noticeChannel(), l.id, l, deliverQueueNotice)
	if err != nil {
		l.Mailbox.Close()
		return nil, jobErr("listen for notices in", p.Queue, err)
	}
	l.sub = s
	return l, nil
}

// listen adds the listener mb, named id, to this instance's subscription
// of channel (starting it with deliver if there is none), waits for Redis
// to confirm the subscription, and returns it.
func (d *Driver) listen(ctx context.Context, channel, id string, mb mailbox, deliver func(*subscription, string)) (*subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errors.New("driver closed")
	}
	s := d.subs[channel]
	if s == nil {
		s = d.subscribe(channel, deliver)
	}
	if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	s.listeners[id] = mb
	ready := s.ready
	d.mu.Unlock()

	// With a listener, the subscription stops only when the driver is
	// closed; then the confirmation never comes.
	select {
	case <-ready:
		return s, nil
	case <-s.ctx.Done():
		s.leave(id, mb)
		return nil, errors.New("driver closed")
	case <-ctx.Done():
		s.leave(id, mb)
		return nil, context.Cause(ctx)
	}
}

// subscribe starts the subscription of channel. d.mu must be held.
func (d *Driver) subscribe(channel string, deliver func(*subscription, string)) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{
		d: d, channel: channel, ctx: ctx, cancel: cancel, deliver: deliver,
		listeners: make(map[string]mailbox),
		ready:     make(chan struct{}),
	}
	d.subs[channel] = s
	d.wg.Add(1)
	go s.run()
	return s
}

// dropIdle ends a subscription whose linger ran out with no listener back.
func (d *Driver) dropIdle(s *subscription) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(s.listeners) == 0 && d.subs[s.channel] == s {
		s.stop()
	}
}

// stop ends the subscription. d.mu must be held.
func (s *subscription) stop() {
	delete(s.d.subs, s.channel)
	if s.linger != nil {
		s.linger.Stop()
	}
	s.cancel()
}

// run keeps the subscription up until it is stopped. After every
// confirmation but the first, and after every break, the listeners are told
// to recheck: notices published meanwhile may be lost.
func (s *subscription) run() {
	defer s.d.wg.Done()
	hook := func(sub rueidis.PubSubSubscription) {
		if sub.Kind != "ssubscribe" {
			return
		}
		s.d.mu.Lock()
		if !s.confirmed {
			s.confirmed = true
			close(s.ready)
		} else {
			s.recheckLocked()
		}
		s.d.mu.Unlock()
	}
	// Receive does not unsubscribe when it returns: a stopped subscription
	// must, or the connection stays subscribed to every key this instance
	// ever waited on. A newer subscription of the channel shares the
	// connection's; if one begins meanwhile, the unsubscription ends its
	// Receive, which resubscribes and rechecks.
	unsubscribe := func(err error, c rueidis.CommandClient) error {
		if s.ctx.Err() == nil {
			return err
		}
		s.d.mu.Lock()
		newer := s.d.subs[s.channel] != nil
		s.d.mu.Unlock()
		if !newer {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = c.Do(ctx, c.B().Sunsubscribe().Channel(s.channel).Build()).Error()
		}
		return err
	}
	ctx := rueidis.WithOnReceiveReturnHook(rueidis.WithOnSubscriptionHook(s.ctx, hook), unsubscribe)
	backoff := 10 * time.Millisecond
	for s.ctx.Err() == nil {
		cmd := s.d.client.B().Ssubscribe().Channel(s.channel).Build()
		err := s.d.client.Receive(ctx, cmd, func(msg rueidis.PubSubMessage) { s.deliver(s, msg.Message) })
		if s.ctx.Err() != nil {
			return
		}
		_ = err // the reason does not matter: resubscribe and recheck
		s.d.mu.Lock()
		s.recheckLocked()
		s.d.mu.Unlock()
		select {
		case <-time.After(backoff):
		case <-s.ctx.Done():
			return
		}
		backoff = min(2*backoff, time.Second)
	}
}

// recheckLocked nudges every listener to ask the backend. d.mu must be held.
func (s *subscription) recheckLocked() {
	for _, l := range s.listeners {
		l.recheck()
	}
}

// deliverGrant hands a published grant "token|fence|granted_ms|ttl_ms" to
// the listener of its token.
func deliverGrant(s *subscription, msg string) {
	parts := strings.Split(msg, "|")
	if len(parts) != 4 {
		return
	}
	fence, err1 := strconv.ParseUint(parts[1], 10, 64)
	at, err2 := strconv.ParseInt(parts[2], 10, 64)
	ttl, err3 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return
	}
	n := batondriver.LockNotice{Fence: fence, GrantedAt: time.UnixMilli(at), TTL: time.Duration(ttl) * time.Millisecond}
	s.d.mu.Lock()
	l, _ := s.listeners[parts[0]].(*listener)
	s.d.mu.Unlock()
	if l == nil {
		return // the waiter gave up; its give-back releases the grant
	}
	select {
	case l.ch <- n:
	default:
		// The mailbox is full of rechecks, which the waiter acts on; the
		// recheck finds this grant.
	}
}

// deliverQueueNotice hands a published queue notice — a recall
// "fence|key", or a cancel "c|id" — to every listener of the queue.
func deliverQueueNotice(s *subscription, msg string) {
	var n batondriver.QueueNotice
	head, rest, ok := strings.Cut(msg, "|")
	if !ok {
		return
	}
	if head == "c" {
		n.Cancel = rest
	} else {
		fence, err := strconv.ParseInt(head, 10, 64)
		if err != nil {
			return
		}
		n.Key, n.Fence = rest, fence
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for _, l := range s.listeners {
		if l, ok := l.(*queueListener); ok {
			l.Post(n)
		}
	}
}

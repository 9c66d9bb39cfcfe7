package batonredis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
)

// Grant notices travel on one shard channel per (lock key, driver instance):
// a release publishes only to the instances whose waiters it granted, and
// each instance hands the notice to the one waiting goroutine it names. One
// subscription per key serves every waiter of this instance on that key and
// lingers after the last one leaves, so a contended key is subscribed once.

// subscription is this instance's subscription to one key's channel.
type subscription struct {
	d       *Driver
	channel string
	ctx     context.Context
	cancel  context.CancelFunc

	// Guarded by d.mu.
	listeners map[string]*listener // by token
	ready     chan struct{}        // closed at the first confirmation
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

func (l *listener) Close() {
	d := l.sub.d
	d.mu.Lock()
	defer d.mu.Unlock()
	s := l.sub
	if s.listeners[l.token] != l {
		return
	}
	delete(s.listeners, l.token)
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
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("batonredis: listen on %q: %w", p.Key, err)
	}
	channel := d.lockKeys(p.Key).channel + d.id
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("batonredis: listen on %q: driver closed", p.Key)
	}
	s := d.subs[channel]
	if s == nil {
		s = d.subscribe(channel)
	}
	if s.linger != nil {
		s.linger.Stop()
		s.linger = nil
	}
	l := &listener{sub: s, token: p.Token, ch: make(chan batondriver.LockNotice, 4)}
	s.listeners[p.Token] = l
	ready := s.ready
	d.mu.Unlock()

	// With a listener, the subscription stops only when the driver is
	// closed; then the confirmation never comes.
	select {
	case <-ready:
		return l, nil
	case <-s.ctx.Done():
		l.Close()
		return nil, fmt.Errorf("batonredis: listen on %q: driver closed", p.Key)
	case <-ctx.Done():
		l.Close()
		return nil, fmt.Errorf("batonredis: listen on %q: %w", p.Key, context.Cause(ctx))
	}
}

// subscribe starts the subscription of channel. d.mu must be held.
func (d *Driver) subscribe(channel string) *subscription {
	ctx, cancel := context.WithCancel(context.Background())
	s := &subscription{
		d: d, channel: channel, ctx: ctx, cancel: cancel,
		listeners: make(map[string]*listener),
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
		err := s.d.client.Receive(ctx, cmd, s.deliver)
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
		select {
		case l.ch <- batondriver.LockNotice{Recheck: true}:
		default: // a notice is pending already; the listener will look
		}
	}
}

// deliver hands a published grant "token|fence|granted_ms|ttl_ms" to the
// listener of its token.
func (s *subscription) deliver(msg rueidis.PubSubMessage) {
	parts := strings.Split(msg.Message, "|")
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
	l := s.listeners[parts[0]]
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

// Package faultproxy is a TCP proxy on a loopback port for fault tests. It
// forwards every connection it accepts to one target, and on request holds
// all traffic, as a network partition does, cuts every connection, as a
// reset or a crashed middlebox does, or cuts a connection as the reply to
// a given request arrives, so that the target acted on a request whose
// reply is lost.
//
// A partition holds bytes rather than dropping them: TCP retransmits through
// a short partition, so what a client sent during it reaches the server,
// late, once the partition heals, and the replies reach the client after
// that. Partitions longer than the peers' timeouts end in a cut connection,
// which the test can make happen with Cut.
package faultproxy

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards connections from its own loopback address to a target.
// Its methods are safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener

	mu     sync.Mutex
	healed *sync.Cond // broadcast when held turns false or the proxy closes
	held   bool
	marker []byte // LoseReplyTo's, while armed
	closed bool
	links  map[*link]struct{}
	wg     sync.WaitGroup
}

// link is one proxied connection: the client's side and the target's.
type link struct {
	client, server net.Conn
	lose           atomic.Bool // cut it as the next reply arrives
}

func (l *link) close() {
	_ = l.client.Close()
	if l.server != nil {
		_ = l.server.Close()
	}
}

// Start starts a proxy to target (host:port) on a free port of 127.0.0.1.
// The caller must Close it.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, links: make(map[*link]struct{})}
	p.healed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartT is Start for tests: it fails tb on error and closes the proxy when
// the test ends.
func StartT(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := Start(target)
	if err != nil {
		tb.Fatalf("faultproxy: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr is the proxy's address, to connect to instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition holds all traffic from now on: bytes in flight either way on
// every connection stay in the proxy, and a connection accepted meanwhile
// reaches the target only after Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Heal ends a partition: held bytes go on, in order.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.held = false
	p.healed.Broadcast()
	p.mu.Unlock()
}

// Cut closes every connection open now, both sides; bytes held for them
// are lost. New connections are accepted as before.
func (p *Proxy) Cut() {
	p.mu.Lock()
	for l := range p.links {
		l.close()
		delete(p.links, l)
	}
	p.mu.Unlock()
}

// LoseReplyTo arms the proxy to lose one reply: the next request, on any
// connection, whose bytes contain marker goes on to the target, and the
// first reply that arrives on that connection after it is dropped and the
// connection cut, both sides. The target has by then acted on the request;
// the client sees its connection close instead of the reply. (A chunk read
// from the client is matched whole, so marker should be short; requests
// pipelined on that connection meanwhile lose their replies too.)
func (p *Proxy) LoseReplyTo(marker string) {
	p.mu.Lock()
	p.marker = []byte(marker)
	p.mu.Unlock()
}

// marked reports whether the request chunk b carries the armed marker,
// and disarms it if so.
func (p *Proxy) marked(b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil || !bytes.Contains(b, p.marker) {
		return false
	}
	p.marker = nil
	return true
}

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.healed.Broadcast()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Cut()
	p.wg.Wait()
	return err
}

// pass waits while traffic is held; false once the proxy is closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.held && !p.closed {
		p.healed.Wait()
	}
	return !p.closed
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		l := &link{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the target for l, once traffic passes, and copies both ways
// until either side ends; then it closes both.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
		l.close()
	}()
	if !p.pass() {
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	_, open := p.links[l] // not cut while dialling
	l.server = s
	p.mu.Unlock()
	if !open {
		_ = s.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.copy(s, l.client, l, false); done <- struct{}{} }()
	go func() { p.copy(l.client, s, l, true); done <- struct{}{} }()
	<-done
	l.close() // either side ending ends the link; the other copy ends too
	<-done
}

// copy forwards src to dst, each chunk only when traffic passes: l's
// replies if reply is set, else its requests, marked as LoseReplyTo says.
func (p *Proxy) copy(dst, src net.Conn, l *link, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if reply && l.lose.Load() {
				l.close()
				return
			}
			if !reply && p.marked(buf[:n]) {
				l.lose.Store(true)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or a closed connection: serve closes both
		}
	}
}

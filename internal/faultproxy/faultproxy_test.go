package faultproxy

import (
	"bufio"
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// echo starts a line echo server on a loopback port, closed with the test.
func echo(t *testing.T) string { return echoLines(t, nil) }

// echoLines is echo that also sends each line it reads to seen, if not nil,
// before echoing it.
func echoLines(t *testing.T, seen chan<- string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if seen != nil {
						seen <- line
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip writes line to c and reads a line back within d.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	t.Helper()
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	got, err := r.ReadString('\n')
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

// connected dials p and checks one round trip through it.
func connected(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 5*time.Second); err != nil || got != "one" {
		t.Fatalf("a round trip through the proxy: %q, %v", got, err)
	}
	return c, r
}

func TestPartitionHoldsThenDelivers(t *testing.T) {
	p := StartT(t, echo(t))
	c, r := connected(t, p)

	p.Partition()
	if got, err := roundTrip(t, c, r, "two", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("during the partition: got %q, %v; want a timeout", got, err)
	}
	// A connection made during the partition waits too.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if got, err := roundTrip(t, c2, r2, "new", 200*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("new connection during the partition: got %q, %v; want a timeout", got, err)
	}

	p.Heal()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("held bytes after healing: %q, %v", got, err)
	}
	if err := c2.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after healing: %q, %v", got, err)
	}
}

func TestCutClosesConnections(t *testing.T) {
	p := StartT(t, echo(t))
	c, r := connected(t, p)
	p.Cut()
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadString('\n'); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the cut: read error %v, want the connection closed", err)
	}
	// New connections still work.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if got, err := roundTrip(t, c2, bufio.NewReader(c2), "two", 5*time.Second); err != nil || got != "two" {
		t.Fatalf("a connection after the cut: %q, %v", got, err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLoseReplyCutsAfterTheTargetActed: the marked request reaches the
// target, its reply does not reach the client, and the connection closes;
// the next reply, on a new connection, is delivered.
func TestLoseReplyCutsAfterTheTargetActed(t *testing.T) {
	lines := make(chan string, 4)
	p := StartT(t, echoLines(t, lines))
	c, r := connected(t, p)
	<-lines

	p.LoseReplyTo("wo")
	if got, err := roundTrip(t, c, r, "two", 5*time.Second); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("with the reply lost: got %q, %v; want the connection closed", got, err)
	}
	select {
	case got := <-lines:
		if got != "two\n" {
			t.Fatalf("the target read %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the target never read the request whose reply was lost")
	}
	connected(t, p) // one reply lost only
}

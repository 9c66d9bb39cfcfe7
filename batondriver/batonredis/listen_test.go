package batonredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/internal/redistest"
)

// TestListenUnsubscribesWhenIdle: a subscription dropped after its linger
// is also dropped by Redis, not only by this process: else the connection
// stays subscribed to every key it ever waited on.
func TestListenUnsubscribesWhenIdle(t *testing.T) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		testListenUnsubscribes(t, newClient(t, redistest.SharedServer(t).Addr()))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		testListenUnsubscribes(t, newClient(t, redistest.SharedCluster(t).Addrs()...))
	})
}

func testListenUnsubscribes(t *testing.T, client rueidis.Client) {
	d, err := New(client, &Config{Prefix: "t" + randomHex(6), ListenerLinger: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx := context.Background()
	channel := d.lockKeys("idle").channel + d.id
	subscribers := func() int64 {
		t.Helper()
		v, err := client.Do(ctx, client.B().PubsubShardnumsub().Channel(channel).Build()).AsIntMap()
		if err != nil {
			t.Fatal(err)
		}
		return v[channel]
	}

	lis, err := d.LockListen(ctx, &batondriver.LockListenParams{Key: "idle", Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if n := subscribers(); n != 1 {
		t.Fatalf("%d subscribers while listening, want 1", n)
	}
	lis.Close()
	deadline := time.Now().Add(2 * time.Second)
	for {
		d.mu.Lock()
		_, subscribed := d.subs[channel]
		d.mu.Unlock()
		n := subscribers()
		if !subscribed && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the linger: subscribed here %v, %d subscribers in Redis", subscribed, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListenEndsWithDriver: a LockListen still waiting for Redis to confirm
// its subscription returns when the driver is closed, whatever its context:
// Close stopped the subscription, so the confirmation never comes.
func TestListenEndsWithDriver(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	client := newClient(t, srv.Addr())
	d, err := New(client, &Config{Prefix: "t" + randomHex(6)})
	if err != nil {
		t.Fatal(err)
	}
	// A connection that is up, to a server that answers nothing.
	if err := client.Do(context.Background(), client.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() })
	done := make(chan error, 1)
	go func() {
		lis, err := d.LockListen(context.Background(), &batondriver.LockListenParams{Key: "k", Token: "tok"})
		if err == nil {
			lis.Close()
		}
		done <- err
	}()
	// Close once LockListen waits: its listener is registered.
	for {
		d.mu.Lock()
		s := d.subs[d.lockKeys("k").channel+d.id]
		waiting := s != nil && len(s.listeners) == 1
		d.mu.Unlock()
		if waiting {
			break
		}
		time.Sleep(time.Millisecond)
	}
	d.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("LockListen succeeded on a closed driver")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("LockListen still waiting 5s after the driver was closed")
	}
}

// TestQueueListenRechecksAfterBreak: recalls published while the
// subscription is down are lost, so a listener whose subscription broke
// hears a Recheck, and recalls reach it again once it is back.
func TestQueueListenRechecksAfterBreak(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, nil)
	client := newClient(t, srv.Addr())
	d := newDriver(t, client)
	ctx := t.Context()
	queue := "q" + randomHex(6)
	l, err := d.QueueListen(ctx, &batondriver.QueueParams{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	admin := newClient(t, srv.Addr())
	if err := admin.Do(ctx, admin.B().ClientKill().TypePubsub().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	receive := func() batondriver.QueueNotice {
		t.Helper()
		select {
		case n := <-l.C():
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("no notice")
			return batondriver.QueueNotice{}
		}
	}
	if n := receive(); !n.Recheck {
		t.Fatalf("after the break: %+v, want a recheck", n)
	}
	// Published until one arrives: the subscription comes back after a
	// back-off, and a recheck may come again with its confirmation.
	channel := d.queueKeys(queue).noticeChannel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := admin.Do(ctx, admin.B().Spublish().Channel(channel).Message("7|k|1").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-l.C():
			if n.Recheck {
				continue
			}
			if n != (batondriver.QueueNotice{Key: "k|1", Fence: 7}) {
				t.Fatalf("got %+v", n)
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no recall 5s after the break")
		}
	}
}

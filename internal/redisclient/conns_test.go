package redisclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestConnectionFailed(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{redis.Nil, false},
		{redis.ErrClosed, false},
		{context.Canceled, false},
		{fmt.Errorf("admit: %w", context.Canceled), false},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{context.DeadlineExceeded, true},
		{io.EOF, true},
	} {
		if got := connectionFailed(c.err); got != c.want {
			t.Errorf("connectionFailed(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A cut closes the address's open connections (a read waiting on one ends at once), refuses new
// dials until the address is a master again, and leaves other addresses alone.
func TestConnsCut(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer func() { _ = c.Close() }() // held open, never answering, until the listener closes
		}
	}()
	addr := l.Addr().String()
	r := &conns{byAddr: map[string][]net.Conn{}, replaced: map[string]bool{}}
	dial := r.dialer((&net.Dialer{Timeout: time.Second}).DialContext)
	ctx := context.Background()
	c1, err := dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.Close() // closed by its pool: forgotten at the next dial
	if _, err := dial(ctx, "tcp", addr); err != nil {
		t.Fatal(err)
	}
	if n := len(r.byAddr[addr]); n != 2 {
		t.Fatalf("%d connections remembered, want 2 (the closed one forgotten)", n)
	}

	read := make(chan error, 1)
	go func() {
		_ = c1.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, err := c1.Read(make([]byte, 1))
		read <- err
	}()
	time.Sleep(50 * time.Millisecond)
	r.cut(addr)
	select {
	case err := <-read:
		if err == nil {
			t.Fatal("a read on a cut connection succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read waiting on a cut connection did not end")
	}
	if _, err := dial(ctx, "tcp", addr); !errors.Is(err, errReplaced) {
		t.Fatalf("dial after the cut: %v, want errReplaced", err)
	}
	r.reinstate(map[string]bool{"127.0.0.1:1": true})
	if _, err := dial(ctx, "tcp", addr); !errors.Is(err, errReplaced) {
		t.Fatalf("dial after another address was reinstated: %v, want errReplaced", err)
	}
	r.reinstate(map[string]bool{addr: true})
	c3, err := dial(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("dial once a master again: %v", err)
	}
	_ = c3.Close()
}

// Close stops the monitor: a closed client's reload still answers the last slot map, so the
// monitor is told; and Close may be called twice.
func TestCloseStopsMonitor(t *testing.T) {
	c := New(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, IsClusterMode: true})
	cl, ok := c.(*Cluster)
	if !ok {
		t.Fatalf("New gave a %T for a cluster, want *Cluster", c)
	}
	_ = cl.Close()
	select {
	case <-cl.m.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the monitor did not stop")
	}
	_ = cl.Close()
	single := New(&redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}})
	defer func() { _ = single.Close() }()
	if _, ok := single.(*redis.Client); !ok {
		t.Errorf("New of one address gave a %T, want a plain client", single)
	}
}

package testsrv

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// TestProxyDropsOneReply sends lines through the proxy to an echo server: they come back until a
// drop is armed, then that reply is lost and the connection closed, and new connections work.
func TestProxyDropsOneReply(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p := StartProxy(t, ln.Addr().String())

	echo := func(c net.Conn, r *bufio.Reader, line string) (string, error) {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte(line + "\n")); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := echo(c, r, "one"); err != nil || got != "one\n" {
		t.Fatalf("echo = %q, %v", got, err)
	}
	p.DropNextReplyContaining("two")
	if got, err := echo(c, r, "nope"); err != nil || got != "nope\n" {
		t.Fatalf("a reply without the marker was dropped: %q, %v", got, err)
	}
	if got, err := echo(c, r, "two"); err == nil {
		t.Fatalf("armed reply = %q; want the connection closed", got)
	}
	if p.Drops() != 1 {
		t.Errorf("drops = %d, want 1", p.Drops())
	}

	c2, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	if got, err := echo(c2, r2, "two"); err != nil || got != "two\n" {
		t.Fatalf("the drop fired twice: %q, %v", got, err)
	}
	p.DropNextReply()
	if got, err := echo(c2, r2, "three"); err == nil {
		t.Fatalf("DropNextReply: got %q, want the connection closed", got)
	}
}

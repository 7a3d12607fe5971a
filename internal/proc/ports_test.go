package proc

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// reusePort sets SO_REUSEPORT on a socket before it binds, as Caddy does on Linux.
func reusePort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, 0xf /* SO_REUSEPORT */, 1)
	}); err != nil {
		return err
	}
	return serr
}

// TestPortSharedBySecondListener: a second SO_REUSEPORT listener on a port binds without an error,
// as a leftover gateway and a new one do; PortFree sees the first before, SoleListener the second
// after, each naming the process.
func TestPortSharedBySecondListener(t *testing.T) {
	p, addr := startHelper(t, "reuseport")
	if err := p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, Dial(addr)); err != nil {
		t.Fatal(err)
	}
	err := PortFree(addr)
	if !errors.Is(err, ErrPortInUse) {
		t.Fatalf("PortFree(%s) with a child listening: %v, want ErrPortInUse", addr, err)
	}
	_, port, _ := net.SplitHostPort(addr)
	for _, want := range []string{"pid " + strconv.Itoa(p.Pid()), "ss -ltnp 'sport = :" + port + "'"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("PortFree error %q does not name %q", err, want)
		}
	}
	if err := SoleListener(addr, p.Pid()); err != nil {
		t.Fatalf("SoleListener with the child alone: %v", err)
	}
	if err := SoleListener(addr, 0); err != nil {
		t.Fatalf("SoleListener(%s, 0) with the child alone: %v", addr, err)
	}

	lc := net.ListenConfig{Control: reusePort}
	l, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatalf("a second SO_REUSEPORT listener on %s: %v", addr, err)
	}
	defer func() { _ = l.Close() }()
	err = SoleListener(addr, p.Pid())
	if !errors.Is(err, ErrPortShared) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("SoleListener with this process on the port too: %v, want ErrPortShared naming pid %d", err, os.Getpid())
	}
	if err := SoleListener(addr, 0); !errors.Is(err, ErrPortShared) {
		t.Fatalf("SoleListener(%s, 0) with two processes on the port: %v, want ErrPortShared", addr, err)
	}
	// A wildcard listener overlaps the loopback one.
	ls, err := Listeners("0.0.0.0:" + port)
	if err != nil || len(ls) != 2 {
		t.Fatalf("Listeners(0.0.0.0:%s) = %v, %v; want the two", port, ls, err)
	}
}

func TestPortFreeNothingListens(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if err := PortFree(addr); err != nil {
		t.Fatalf("PortFree(%s) with nothing on it: %v", addr, err)
	}
	if err := SoleListener(addr, os.Getpid()); err != nil {
		t.Fatalf("SoleListener(%s) with nothing on it: %v", addr, err)
	}
	if err := PortFree("localhost:80"); err == nil {
		t.Fatal("PortFree accepted a host name: it wants an IP")
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:4850":                         "127.0.0.1:18512",
		"00000000:0050":                         "0.0.0.0:80",
		"00000000000000000000000001000000:1111": "[::1]:4369",
		"00000000000000000000000000000000:0050": "[::]:80",
		"0000000000000000FFFF00000100007F:0050": "127.0.0.1:80", // IPv4-mapped
	} {
		got, err := parseProcAddr(in)
		if err != nil || got != netip.MustParseAddrPort(want) {
			t.Errorf("parseProcAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "0100007F:XYZ", "01007F:0050", "zz00007F:0050"} {
		if _, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q) accepted", bad)
		}
	}
}

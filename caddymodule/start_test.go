package caddymodule_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// The one place where the tests of this package start Caddy in their own process. Caddy's state
// is global: tests that start it must not run in parallel.

// freePort returns a free TCP port of the loopback interface.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// loadCaddyfile adapts text and loads (or reloads) it into the Caddy of this process.
func loadCaddyfile(t testing.TB, text string) error {
	t.Helper()
	cfg, err := adapt(t, text)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	if err := caddy.Load([]byte(cfg), true); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// runCaddyfile loads text into the Caddy of this process, which stops when the test ends.
func runCaddyfile(t testing.TB, text string) {
	t.Helper()
	if err := loadCaddyfile(t, text); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// caddyfile returns a complete Caddyfile serving the seckill handler on port, with the given
// seckill app body and site body.
func caddyfile(t testing.TB, port int, seckill, site string) string {
	return caddyfileAdmin(t, "off", port, seckill, site)
}

// caddyfileAdmin is caddyfile with the admin endpoint at admin ("off" for none).
func caddyfileAdmin(t testing.TB, admin string, port int, seckill, site string) string {
	return fmt.Sprintf(`{
	admin %s
	auto_https off
	persist_config off
	http_port %d
	storage file_system %s
	log {
		level ERROR
	}
	seckill {
%s
	}
}

http://127.0.0.1:%d {
%s
}
`, admin, port, t.TempDir(), seckill, port, site)
}

// startCaddy runs Caddy with caddyfile(seckill, site) on a free port and returns the base URL.
func startCaddy(t testing.TB, seckill, site string) string {
	t.Helper()
	port := freePort(t)
	runCaddyfile(t, caddyfile(t, port, seckill, site))
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// startCaddyAdmin is startCaddy with Caddy's admin endpoint on, at the host:port it returns too.
func startCaddyAdmin(t testing.TB, seckill, site string) (base, adminAddr string) {
	t.Helper()
	port := freePort(t)
	adminAddr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	runCaddyfile(t, caddyfileAdmin(t, adminAddr, port, seckill, site))
	return fmt.Sprintf("http://127.0.0.1:%d", port), adminAddr
}

// loadCaddy loads (or reloads) caddyfile(port, seckill, site) into the Caddy of this process.
// After a reload it returns once the old server no longer listens on port: Caddy binds each
// configuration's listener with SO_REUSEPORT and returns from a reload once the old server has
// only been told to shut down, so until then the kernel may still queue a new connection on the
// old socket, which is reset when that socket closes. A client that kept a connection alive
// across the reload must still drop it (client.afterReload): the old server closes it at a
// moment of its own, and a request sent on it then fails with EOF.
func loadCaddy(t testing.TB, port int, seckill, site string) error {
	t.Helper()
	if err := loadCaddyfile(t, caddyfile(t, port, seckill, site)); err != nil {
		return err
	}
	waitSoleListener(t, port)
	return nil
}

// waitSoleListener waits until exactly one socket listens on the TCP port, as the kernel lists
// them in /proc/net/tcp and /proc/net/tcp6.
func waitSoleListener(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := listeners(port)
		if err != nil {
			t.Fatalf("count the listeners on port %d: %v", port, err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sockets still listen on port %d 10 s after a reload; want the new server's only", n, port)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// listeners counts the sockets in state LISTEN (0A) on the local TCP port.
func listeners(port int) (int, error) {
	n := 0
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "0A" {
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); ok && err == nil && int(p) == port {
				n++
			}
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", table, err)
		}
	}
	return n, nil
}

package testcaddy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// FreePort returns a free TCP port of the loopback interface.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Adapt adapts a Caddyfile to indented JSON.
func Adapt(t testing.TB, caddyfile string) (string, error) {
	t.Helper()
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "\t"); err != nil {
		t.Fatalf("adapter output is not JSON: %v\n%s", err, out)
	}
	return buf.String(), nil
}

// LoadCaddyfile adapts text and loads (or reloads) it into the Caddy of this process.
func LoadCaddyfile(t testing.TB, text string) error {
	t.Helper()
	cfg, err := Adapt(t, text)
	if err != nil {
		return fmt.Errorf("adapt: %w", err)
	}
	if err := caddy.Load([]byte(cfg), true); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// RunCaddyfile loads text into the Caddy of this process, which stops when the test ends.
func RunCaddyfile(t testing.TB, text string) {
	t.Helper()
	if err := LoadCaddyfile(t, text); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := caddy.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
}

// Caddyfile returns a complete Caddyfile serving the seckill handler on port, with the given
// seckill app body and site body.
func Caddyfile(t testing.TB, port int, seckill, site string) string {
	return CaddyfileAdmin(t, "off", port, seckill, site)
}

// CaddyfileAdmin is Caddyfile with the admin endpoint at admin ("off" for none).
func CaddyfileAdmin(t testing.TB, admin string, port int, seckill, site string) string {
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

// StartCaddy runs Caddy with Caddyfile(seckill, site) on a free port and returns the base URL.
func StartCaddy(t testing.TB, seckill, site string) string {
	t.Helper()
	port := FreePort(t)
	RunCaddyfile(t, Caddyfile(t, port, seckill, site))
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// StartCaddyAdmin is StartCaddy with Caddy's admin endpoint on, at the host:port it returns too.
func StartCaddyAdmin(t testing.TB, seckill, site string) (base, adminAddr string) {
	t.Helper()
	port := FreePort(t)
	adminAddr = fmt.Sprintf("127.0.0.1:%d", FreePort(t))
	RunCaddyfile(t, CaddyfileAdmin(t, adminAddr, port, seckill, site))
	return fmt.Sprintf("http://127.0.0.1:%d", port), adminAddr
}

// LoadCaddy loads (or reloads) Caddyfile(port, seckill, site) into the Caddy of this process.
// After a reload it returns once the old server no longer listens on port: Caddy binds each
// configuration's listener with SO_REUSEPORT and returns from a reload once the old server has
// only been told to shut down, so until then the kernel may still queue a new connection on the
// old socket, which is reset when that socket closes. A client that kept a connection alive
// across the reload must still drop it (Client.AfterReload): the old server closes it at a
// moment of its own, and a request sent on it then fails with EOF.
func LoadCaddy(t testing.TB, port int, seckill, site string) error {
	t.Helper()
	return LoadCaddyfileOn(t, port, Caddyfile(t, port, seckill, site))
}

// LoadCaddyfileOn is LoadCaddy for a whole Caddyfile text whose one site listens on port.
func LoadCaddyfileOn(t testing.TB, port int, text string) error {
	t.Helper()
	if err := LoadCaddyfile(t, text); err != nil {
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

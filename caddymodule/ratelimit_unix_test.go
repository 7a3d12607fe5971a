package caddymodule_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestIPLimitOnUnixSocket: a site served on a Unix socket (behind a local nginx or HAProxy) has
// no client_ip unless trusted_proxies_unix names the proxy's header. The IP limit must not then
// put every buyer into one bucket: the first press would spend the whole sale's budget and every
// other buyer, however slow, would be answered 429.
func TestIPLimitOnUnixSocket(t *testing.T) {
	now := time.Now()
	sock := filepath.Join(t.TempDir(), "caddy.sock")
	text := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		level ERROR
	}
	seckill {
%s
		rate_limit ip 1/m
	}
}

http:// {
	bind unix/%s
%s
}
`, t.TempDir(), jwtBlock+"captcha off\n"+activityBlock("unix", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), sock, route)
	runCaddyfile(t, text)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	// Three buyers, each once, as the proxy in front forwards them.
	for i := range 3 {
		req, err := http.NewRequest(http.MethodGet, "http://localhost/seckill/unix", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i+1))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			t.Fatalf("buyer %d, pressing once, was answered 429: every buyer on the socket shares one IP bucket", i+1)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("buyer %d: status %d", i+1, resp.StatusCode)
		}
	}
}

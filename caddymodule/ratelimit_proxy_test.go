package caddymodule_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestIPLimitBehindAppendingProxy: behind a load balancer that appends the peer address to
// X-Forwarded-For (nginx's $proxy_add_x_forwarded_for, most cloud load balancers), the client
// writes the left part of the header. Caddy's client_ip takes the left-most address unless
// trusted_proxies_strict is set, so without it every press may name another address and the IP
// limit never refuses; with it, client_ip is the right-most untrusted address, the one the proxy
// wrote, and the limit holds. The README's deployment advice therefore sets it, and the app logs a
// warning at start naming a server that trusts proxies without it.
func TestIPLimitBehindAppendingProxy(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) { ipLimitBehindProxy(t, strict) })
	}
}

func ipLimitBehindProxy(t *testing.T, strict bool) {
	now := time.Now()
	port, dir := freePort(t), t.TempDir()
	logFile := filepath.Join(dir, "caddy.log")
	opt := ""
	if strict {
		opt = "\t\ttrusted_proxies_strict\n"
	}
	text := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	http_port %d
	storage file_system %s
	log {
		output file %s
		level WARN
	}
	servers {
		trusted_proxies static 127.0.0.1/32
		client_ip_headers X-Forwarded-For
%s	}
	seckill {
%s
		rate_limit ip 1/m
	}
}

http://127.0.0.1:%d {
%s
}
`, port, dir, logFile, opt, jwtBlock+"captcha off\n"+activityBlock("xff", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), port, route)
	runCaddyfile(t, text)
	warned, log := logEntries(t, logFile, "trusted_proxies without trusted_proxies_strict")
	switch {
	case strict && len(warned) != 0:
		t.Errorf("warned with trusted_proxies_strict: %v", warned)
	case !strict && (len(warned) != 1 || warned[0]["level"] != "warn" || fmt.Sprint(warned[0]["servers"]) != "[srv0]"):
		t.Errorf("without trusted_proxies_strict: %v, want one warning naming server srv0; log:\n%s", warned, log)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	limited := 0
	for i := range 5 {
		// What the proxy forwards: the client's own header, then the client's address.
		xff := fmt.Sprintf("198.51.100.%d, 203.0.113.7", i+1)
		if r := c.Do(http.MethodGet, "/seckill/xff", "", nil, "X-Forwarded-For", xff); r.Status == http.StatusTooManyRequests {
			limited++
		}
	}
	if strict && limited != 4 {
		t.Errorf("trusted_proxies_strict: %d of 5 presses from one client limited, want 4", limited)
	}
	if !strict && limited != 0 {
		t.Errorf("without trusted_proxies_strict: %d of 5 presses limited; Caddy's client_ip changed", limited)
	}
}

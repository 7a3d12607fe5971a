package caddymodule_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestMetrics checks the Prometheus metrics on Caddy's metrics handler.
func TestMetrics(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("m", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n")
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	bobPath := buyPath(t, c, "m", bob)
	expect(t, "win", c.post(buyPath(t, c, "m", alice), alice, ""), http.StatusAccepted, "queued")
	expect(t, "lose", c.post(bobPath, bob, ""), http.StatusGone, "sold_out")
	expect(t, "unknown", c.get("/seckill/nosuch", ""), http.StatusNotFound, "not_found")

	r := c.get("/metrics", "")
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %d", r.status)
	}
	out := string(r.raw)
	for _, want := range []string{
		`caddy_seckill_requests_total{activity="m",call="buy",code="queued"} 1`,
		`caddy_seckill_requests_total{activity="m",call="buy",code="sold_out"} 1`,
		`caddy_seckill_requests_total{activity="m",call="path",code="ok"} 2`,
		`caddy_seckill_requests_total{activity="",call="status",code="not_found"} 1`,
		`caddy_seckill_admission_duration_seconds_count{activity="m",outcome="queued"} 1`,
		`caddy_seckill_remaining{activity="m"} 0`,
		`caddy_seckill_breaker_state 0`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, leak := range []string{"alice", "bob", "127.0.0.1", "nosuch"} {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "caddy_seckill_") && strings.Contains(line, leak) {
				t.Errorf("metric line names %q: %s", leak, line)
			}
		}
	}
}

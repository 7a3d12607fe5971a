package caddymodule_test

import (
	"fmt"
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
	expect(t, "win", c.Post(buyPath(t, c, "m", alice), alice, ""), http.StatusAccepted, "queued")
	expect(t, "lose", c.Post(bobPath, bob, ""), http.StatusGone, "sold_out")
	expect(t, "unknown", c.Get("/seckill/nosuch", ""), http.StatusNotFound, "not_found")

	r := c.Get("/metrics", "")
	if r.Status != http.StatusOK {
		t.Fatalf("metrics: %d", r.Status)
	}
	out := string(r.Raw)
	for _, want := range []string{
		`caddy_seckill_requests_total{activity="m",call="buy",code="queued"} 1`,
		`caddy_seckill_requests_total{activity="m",call="buy",code="sold_out"} 1`,
		`caddy_seckill_requests_total{activity="m",call="path",code="ok"} 2`,
		`caddy_seckill_requests_total{activity="",call="status",code="not_found"} 1`,
		`caddy_seckill_admission_duration_seconds_count{activity="m",outcome="queued"} 1`,
		`caddy_seckill_remaining{activity="m"} 0`,
		`caddy_seckill_breaker_state 0`,
		`caddy_seckill_stock{activity="m"} 1`,
		`caddy_seckill_dead_letters{activity="m"} 0`,
		`caddy_seckill_wins{activity="m"} `, // the store's count at the last refresh: 0 or 1 here
		`caddy_seckill_reconcile_runs_total{result="ok"} 0`,
		`caddy_seckill_reconcile_runs_total{result="violated"} 0`,
		`caddy_seckill_reconcile_runs_total{result="error"} 0`,
		`caddy_seckill_jwks_refresh_failures_total 0`,
		fmt.Sprintf(`caddy_seckill_start_timestamp_seconds{activity="m"} %v`, float64(now.Add(-time.Minute).Unix())),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The sale sold out during this test: the moment is between the start of the test and now.
	soldOut := metricValue(t, out, `caddy_seckill_sold_out_timestamp_seconds{activity="m"}`)
	if soldOut < float64(now.Unix()) || soldOut > float64(time.Now().Unix()+1) {
		t.Errorf("sold_out_timestamp_seconds = %v, want between %d and now", soldOut, now.Unix())
	}
	for _, leak := range []string{"alice", "bob", "127.0.0.1", "nosuch"} {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "caddy_seckill_") && strings.Contains(line, leak) {
				t.Errorf("metric line names %q: %s", leak, line)
			}
		}
	}
}

// TestMetricsLocalCommits: with store local, every answered win is in a commit that the commit
// counters show, and the stores without a folder export none of them.
func TestMetricsLocalCommits(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, "store local "+t.TempDir()+"\nurl_secret metrics-url-secret-0123456789abcdef\n"+jwtBlock+"captcha off\n"+
		activityBlock("m", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n")
	c := newClient(t, base)
	for _, u := range []string{"alice", "bob", "carol"} {
		tok := token(t, u)
		expect(t, "win", c.Post(buyPath(t, c, "m", tok), tok, ""), http.StatusAccepted, "queued")
	}
	// The definition and three wins at least: each answered once in the ring, committed within
	// a few milliseconds, together or not.
	var out string
	var commits, changes, secs float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && changes < 4; time.Sleep(10 * time.Millisecond) {
		out = string(c.Get("/metrics", "").Raw)
		commits = metricValue(t, out, "caddy_seckill_local_commits_total")
		changes = metricValue(t, out, "caddy_seckill_local_committed_changes_total")
		secs = metricValue(t, out, "caddy_seckill_local_commit_seconds_total")
	}
	if commits < 1 || changes < 4 || changes < commits || secs <= 0 {
		t.Errorf("commits %v, changes %v, seconds %v: want the definition and 3 wins committed", commits, changes, secs)
	}
	// The writer checkpoints about once a second after commits.
	deadline := time.Now().Add(5 * time.Second)
	for {
		out = string(c.Get("/metrics", "").Raw)
		n := metricValue(t, out, "caddy_seckill_local_checkpoints_total")
		failed := metricValue(t, out, "caddy_seckill_local_checkpoints_failed_total")
		took := metricValue(t, out, "caddy_seckill_local_checkpoint_seconds_total")
		if failed != 0 {
			t.Fatalf("%v checkpoints failed", failed)
		}
		if n >= 1 && took > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints %v taking %v s, 5 s after the commits: want one at least", n, took)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMetricsNoLocalCommits: the memory store has no commits to count.
func TestMetricsNoLocalCommits(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("m", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n")
	if out := string(newClient(t, base).Get("/metrics", "").Raw); strings.Contains(out, "caddy_seckill_local_") {
		t.Error("store memory exports store local's commit counters")
	}
}

package caddymodule_test

import (
	"bufio"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestReplicasAck: with store redis { replicas_ack 1 } a buy is 202 while the replica confirms
// it; with the replica stopped the buy is 503 busy within about the timeout, counted at layer
// replicas_ack and as a WAIT shortfall, while the win is on the master; the result poll is 503
// busy too (a failover now would lose the win: nobody may be told of it yet); once the replica
// is back, the retry with the same Idempotency-Key replays the win and the poll shows it.
func TestReplicasAck(t *testing.T) {
	master := testsrv.StartRedis(t)
	replica := testsrv.StartReplica(t, master)
	now := time.Now()
	// 500 ms, the widest timeout: a slow acknowledgement on a loaded machine must not fail the
	// buys made while the replica runs.
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret u\nstore redis "+master.Addr+" {\n\treplicas_ack 1 500ms\n}\n"+
		activityBlock("ack", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n")
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	alicePath, bobPath := buyPath(t, c, "ack", alice), buyPath(t, c, "ack", bob)
	expect(t, "alice buys with the replica up", c.Post(alicePath, alice, "", "Idempotency-Key", "ka"), http.StatusAccepted, "queued")
	before := scrapeFunnel(t, c)

	replica.Pause()
	began := time.Now()
	r := c.Post(bobPath, bob, "", "Idempotency-Key", "kb")
	took := time.Since(began)
	expect(t, "bob buys with the replica stopped", r, http.StatusServiceUnavailable, "busy")
	if r.Header.Get("Retry-After") != "1" {
		t.Errorf("Retry-After %q, want 1", r.Header.Get("Retry-After"))
	}
	if took < 450*time.Millisecond || took > 5*time.Second {
		t.Errorf("the unconfirmed buy took %v, want about the 500ms timeout", took)
	}
	after := scrapeFunnel(t, c)
	for _, l := range funnelLayers {
		want := 0.0
		if l == "replicas_ack" {
			want = 1
		}
		if d := after.layers[l] - before.layers[l]; d != want {
			t.Errorf("layer %s grew by %g, want %g", l, d, want)
		}
	}
	waits, short := replicaAckCounters(t, c)
	if waits < 2 || short != 1 {
		t.Errorf("replicas_ack waits %g, shortfalls %g; want ≥ 2 and 1", waits, short)
	}
	// 503 here means "unknown", not "no": the master holds bob's win, which no replica has yet.
	expect(t, "bob's result with the replica stopped", c.Get("/seckill/ack/result", bob), http.StatusServiceUnavailable, "busy")

	replica.Resume()
	r = c.Post(bobPath, bob, "", "Idempotency-Key", "kb")
	expect(t, "bob retries with the replica back", r, http.StatusAccepted, "queued")
	res := c.Get("/seckill/ack/result", bob)
	expect(t, "bob's result with the replica back", res, http.StatusOK, "queued")
	if got, want := r.Str("reservation_id"), res.Str("reservation_id"); got == "" || got != want {
		t.Errorf("the retry's reservation %q, want the win the result shows, %q", got, want)
	}
	if n := remaining(t, "ack"); n != 3 {
		t.Errorf("remaining %d, want 3 (alice's and bob's one win each)", n)
	}
}

// replicaAckCounters reads caddy_seckill_replicas_ack_waits_total and _shortfalls_total.
func replicaAckCounters(t *testing.T, c *client) (waits, shortfalls float64) {
	t.Helper()
	r := c.Get("/metrics", "")
	found := 0
	sc := bufio.NewScanner(bytes.NewReader(r.Raw))
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		switch name {
		case "caddy_seckill_replicas_ack_waits_total":
			waits, found = v, found+1
		case "caddy_seckill_replicas_ack_shortfalls_total":
			shortfalls, found = v, found+1
		default:
			continue
		}
		if err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
	}
	if found != 2 {
		t.Fatalf("metrics lack the replicas_ack counters: %s", r.Raw)
	}
	return waits, shortfalls
}

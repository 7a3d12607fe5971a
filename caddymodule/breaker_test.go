package caddymodule_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestStoreDown: while Redis is down every buy is answered 503 busy with Retry-After (fail closed,
// nothing admitted), and once it is back the sale goes on where it was.
func TestStoreDown(t *testing.T) {
	rd := testsrv.StartRedis(t, testsrv.WithAOF("always"))
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret u\nstore redis "+rd.Addr+"\n"+
		activityBlock("down", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	alicePath, bobPath := buyPath(t, c, "down", alice), buyPath(t, c, "down", bob)
	expect(t, "bob wins before", c.Post(bobPath, bob, ""), http.StatusAccepted, "queued")

	rd.Kill()
	for i := range 8 { // past the breaker's threshold: the later ones do not even try the store
		r := c.Post(alicePath, alice, "")
		expect(t, "buy while down", r, http.StatusServiceUnavailable, "busy")
		if r.Header.Get("Retry-After") != "1" {
			t.Errorf("buy %d while down: Retry-After %q", i, r.Header.Get("Retry-After"))
		}
	}
	expect(t, "result while down", c.Get("/seckill/down/result", alice), http.StatusServiceUnavailable, "busy")
	// The public status keeps answering from the last reading.
	if st := c.Get("/seckill/down", ""); st.Status != http.StatusOK || st.Num("remaining") != 4 {
		t.Errorf("status while down: %s", st)
	}

	rd.Restart()
	var r response
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if r = c.Post(alicePath, alice, ""); r.Status != http.StatusServiceUnavailable {
			break
		}
	}
	expect(t, "buy after recovery", r, http.StatusAccepted, "queued")
	if n := remaining(t, "down"); n != 3 {
		t.Errorf("remaining %d, want 3 (two wins)", n)
	}
}

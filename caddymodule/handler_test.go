package caddymodule_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/forwardsig"
)

// TestForward checks that a winner goes on to the next handler with signed headers, the body
// intact, and that client-supplied Seckill-* headers never get through.
func TestForward(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nforward_secret fwd-secret\n"+
		activityBlock("fw", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0),
		`route /seckill/* {
	seckill {
		forward
	}
	respond "{http.request.header.Seckill-Reservation}|{http.request.header.Seckill-Activity}|{http.request.header.Seckill-User}|{http.request.header.Seckill-Qty}|{http.request.header.Seckill-Signature}|{http.request.header.Seckill-Evil}|{http.request.body}|{http.seckill.code}|{http.request.header.Seckill-Timestamp}" 201
}`)
	c := newClient(t, base)
	alice := token(t, "alice")

	// Forged headers on a call that does not win are stripped too (they would reach handle_errors
	// and logs otherwise); here the call is refused before forwarding anyway.
	path, bobPath := buyPath(t, c, "fw", alice), buyPath(t, c, "fw", token(t, "bob"))
	r := c.Post(path, alice, `{"qty":1}`, "Seckill-User", "mallory", "Seckill-Evil", "x", "seckill-qty", "99", "Seckill-Timestamp", "1")
	if r.Status != http.StatusCreated {
		t.Fatalf("forwarded buy: %s", r)
	}
	f := strings.Split(string(r.Raw), "|")
	if len(f) != 9 {
		t.Fatalf("forwarded answer %q", r.Raw)
	}
	h := http.Header{}
	h.Set(forwardsig.HeaderReservation, f[0])
	h.Set(forwardsig.HeaderActivity, f[1])
	h.Set(forwardsig.HeaderUser, f[2])
	h.Set(forwardsig.HeaderQty, f[3])
	h.Set(forwardsig.HeaderSignature, f[4])
	h.Set(forwardsig.HeaderTimestamp, f[8])
	w, ok := forwardsig.Verify(h, []byte("fwd-secret"))
	if !ok {
		t.Fatalf("signature does not verify: %q", r.Raw)
	}
	if w.Activity != "fw" || w.User != "alice" || w.Qty != 1 || w.Reservation == "" {
		t.Errorf("forwarded win %+v", w)
	}
	if f[5] != "" {
		t.Errorf("client header Seckill-Evil reached the next handler: %q", f[5])
	}
	if f[6] != `{"qty":1}` {
		t.Errorf("forwarded body %q", f[6])
	}
	if f[7] != "queued" {
		t.Errorf("{http.seckill.code} = %q", f[7])
	}
	// The loser is answered by the edge; nothing is forwarded.
	expect(t, "loser", c.Post(bobPath, token(t, "bob"), ""), http.StatusGone, "sold_out")
}

// TestHandleErrors checks that with handle_errors routes the refusals go to them (restyled here
// for sold_out), and that the seckill handler inside handle_errors writes the default JSON body.
func TestHandleErrors(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("he", 0, 1, now.Add(-time.Minute), now.Add(time.Hour), 0),
		route+`handle_errors {
	@soldout expression `+"`{http.seckill.code} == \"sold_out\"`"+`
	respond @soldout "restyled {http.seckill.code}" 410
	seckill
}`)
	c := newClient(t, base)
	alice := token(t, "alice")
	r := c.Post(buyPath(t, c, "he", alice), alice, "")
	if r.Status != http.StatusGone || string(r.Raw) != "restyled sold_out" {
		t.Errorf("restyled sold_out: %d %q", r.Status, r.Raw)
	}
	expect(t, "default body in handle_errors", c.Get("/seckill/nope", ""), http.StatusNotFound, "not_found")
	u := c.Get("/seckill/he/result", "")
	expect(t, "401 in handle_errors", u, http.StatusUnauthorized, "unauthorized")
	if u.Header.Get("WWW-Authenticate") == "" {
		t.Error("WWW-Authenticate lost in handle_errors")
	}
	m := c.Do(http.MethodDelete, "/seckill/he", "", nil)
	expect(t, "405 in handle_errors", m, http.StatusMethodNotAllowed, "method_not_allowed")
	if m.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("Allow lost in handle_errors: %q", m.Header.Get("Allow"))
	}
}

// TestErrorsReturnWithoutHandleErrors: errors "return" on a server without handle_errors leaves the
// body to Caddy (empty), which is what the admin asked for.
func TestErrorsReturnWithoutHandleErrors(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("ret", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0),
		"route /seckill/* {\n\tseckill {\n\t\terrors return\n\t}\n}\n")
	r := newClient(t, base).Get("/seckill/nope", "")
	if r.Status != http.StatusNotFound || len(r.Raw) != 0 {
		t.Errorf("errors return: %d %q", r.Status, r.Raw)
	}
}

// TestRateLimitIP checks the 429 and its headers.
func TestRateLimitIP(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nrate_limit ip 2/s burst 2\n"+
		activityBlock("rl", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	var limited response
	for range 5 {
		if r := c.Get("/seckill/rl", ""); r.Status == http.StatusTooManyRequests {
			limited = r
			break
		}
	}
	expect(t, "ip limit", limited, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(limited.Header.Get("Retry-After")); err != nil || s < 1 {
		t.Errorf("Retry-After %q", limited.Header.Get("Retry-After"))
	}
	if got := limited.Header.Get("RateLimit-Policy"); got != "2;w=1" {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := limited.Header.Get("RateLimit"); !strings.HasPrefix(got, "limit=2, remaining=0, reset=") {
		t.Errorf("RateLimit %q", got)
	}
}

// TestRateLimitUser checks the per-user limit, and that polling results has its own budget.
func TestRateLimitUser(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nrate_limit user 1/m burst 1\n"+
		activityBlock("ru", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	path := buyPath(t, c, "ru", alice)
	r := c.Post(path, alice, "")
	expect(t, "second call of alice", r, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
		t.Errorf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	if got := r.Header.Get("RateLimit-Policy"); got != "1;w=60" {
		t.Errorf("RateLimit-Policy %q", got)
	}
	buyPath(t, c, "ru", bob) // bob has his own bucket
	expect(t, "alice polls her result", c.Get("/seckill/ru/result", alice), http.StatusOK, "none")
	expect(t, "alice polls again", c.Get("/seckill/ru/result", alice), http.StatusTooManyRequests, "rate_limited")
	if n := remaining(t, "ru"); n != 5 {
		t.Errorf("remaining %d, want 5", n)
	}
}

// TestSoldOutState checks the status after a sell-out and that every later call may answer
// sold_out without touching the store.
func TestSoldOutState(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("so", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)+
		activityBlock("done", 1, 1, now.Add(-2*time.Hour), now.Add(-time.Hour), 0), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	bobPath := buyPath(t, c, "so", bob)
	expect(t, "alice wins", c.Post(buyPath(t, c, "so", alice), alice, ""), http.StatusAccepted, "queued")
	expect(t, "bob loses", c.Post(bobPath, bob, ""), http.StatusGone, "sold_out")
	expect(t, "path after the sell-out", c.Post("/seckill/so/path", bob, ""), http.StatusGone, "sold_out")
	st := c.Get("/seckill/so", "")
	if st.Str("state") != "sold_out" || st.Num("remaining") != 0 {
		t.Errorf("status after the sell-out: %s", st)
	}

	expect(t, "path after the end", c.Post("/seckill/done/path", bob, ""), http.StatusForbidden, "ended")
	if st := c.Get("/seckill/done", ""); st.Str("state") != "ended" {
		t.Errorf("status after the end: %s", st)
	}
}

// TestForwardUserHeaderRoundTrip: the forwarded Seckill-User must reach the shop as it was signed.
// HTTP strips the white space around a header value (RFC 9110 §5.5), so a user id starting or
// ending with a space or a tab cannot be carried: such a token must be refused at the edge (401,
// nothing taken) rather than win an item whose forwarded headers the shop cannot verify.
func TestForwardUserHeaderRoundTrip(t *testing.T) {
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := forwardsig.Verify(r.Header, []byte("fwd-secret")); !ok {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(shop.Close)
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nforward_secret fwd-secret\n"+
		activityBlock("ws", 10, 1, now.Add(-time.Minute), now.Add(time.Hour), 0),
		"route /seckill/* {\n\tseckill {\n\t\tforward\n\t}\n\treverse_proxy "+strings.TrimPrefix(shop.URL, "http://")+"\n}\n")
	c := newClient(t, base)
	for _, user := range []string{"carol", "alice ", " bob", "dave\t", "e v e"} {
		tok := token(t, user)
		r := c.Post("/seckill/ws/path", tok, "")
		if r.Status == http.StatusUnauthorized {
			continue // refused before anything was taken
		}
		if r.Status != http.StatusOK {
			t.Fatalf("path for %q: %s", user, r)
		}
		if b := c.Post(r.Str("path"), tok, ""); b.Status != http.StatusCreated {
			t.Errorf("user %q won, but the shop refused the forwarded win: %d %q", user, b.Status, b.Raw)
		}
	}
	if got := remaining(t, "ws"); got != 8 {
		t.Errorf("remaining %d, want 8: carol and e v e bought, nobody else took an item", got)
	}
}

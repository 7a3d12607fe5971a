package caddymodule_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestFlowNoCaptcha walks a buyer through status, path, buy, retry and result with the memory
// store and the captcha off.
func TestFlowNoCaptcha(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("sale-1", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	alice := token(t, "alice")

	st := c.Get("/seckill/sale-1", "")
	expect(t, "status", st, http.StatusOK, "ok")
	if st.Str("state") != "open" || st.Num("remaining") != 5 || st.Str("activity") != "sale-1" {
		t.Errorf("status: %s", st)
	}
	if got := st.Header.Get("Cache-Control"); got != "public, max-age=1" {
		t.Errorf("status Cache-Control = %q", got)
	}
	if ms := st.Num("server_time_ms"); ms < now.UnixMilli()-5000 || ms > time.Now().UnixMilli()+5000 {
		t.Errorf("server_time_ms %d is not now", ms)
	}
	if st.Num("start_ms") != now.Add(-time.Minute).Unix()*1000 || st.Num("end_ms") != now.Add(time.Hour).Unix()*1000 {
		t.Errorf("status window: %s", st)
	}

	p := c.Post("/seckill/sale-1/path", alice, "")
	expect(t, "path", p, http.StatusOK, "ok")
	path := p.Str("path")
	if !strings.HasPrefix(path, "/seckill/sale-1/buy/") {
		t.Fatalf("path %q", path)
	}

	b := c.Post(path, alice, "", "Idempotency-Key", "k-1")
	expect(t, "buy", b, http.StatusAccepted, "queued")
	res := b.Str("reservation_id")
	if res == "" || b.Num("remaining") != 4 {
		t.Fatalf("buy: %s", b)
	}
	again := c.Post(path, alice, "", "Idempotency-Key", "k-1")
	expect(t, "retry", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != res {
		t.Errorf("retry got reservation %q, want the first answer %q", again.Str("reservation_id"), res)
	}
	expect(t, "second buy", c.Post(path, alice, ""), http.StatusConflict, "limit_reached")

	r := c.Get("/seckill/sale-1/result", alice)
	expect(t, "result", r, http.StatusOK, "queued")
	if r.Str("reservation_id") != res {
		t.Errorf("result: %s", r)
	}
	expect(t, "result of another user", c.Get("/seckill/sale-1/result", token(t, "bob")), http.StatusOK, "none")
	if n := remaining(t, "sale-1"); n != 4 {
		t.Errorf("remaining %d, want 4", n)
	}
}

// TestRetryAfterSellOut: a winner's retry with the same Idempotency-Key gets the first answer
// back even though its win sold the activity out; any other key gets sold_out, without a token
// too once the node knows the held keys.
func TestRetryAfterSellOut(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("last", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	alicePath, bobPath := buyPath(t, c, "last", alice), buyPath(t, c, "last", bob)
	first := c.Post(alicePath, alice, "", "Idempotency-Key", "once")
	expect(t, "win", first, http.StatusAccepted, "queued")
	expect(t, "bob after the sell-out", c.Post(bobPath, bob, "", "Idempotency-Key", "b"), http.StatusGone, "sold_out")
	again := c.Post(alicePath, alice, "", "Idempotency-Key", "once")
	expect(t, "retry", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != first.Str("reservation_id") {
		t.Errorf("retry: reservation %q, want %q", again.Str("reservation_id"), first.Str("reservation_id"))
	}
	expect(t, "no key after the sell-out", c.Post(alicePath, alice, ""), http.StatusGone, "sold_out")

	// Once the node has loaded the held wins' request ids, a key that is none of them is sold out
	// by the flag before the token is looked at (before, the store would say limit_reached to a
	// winner's new key), and only a held key goes the whole way (a 401 without a token).
	eventually(t, "the held request ids of last loaded", func() (bool, string) { return app(t).Guard().HeldLoaded("last"), "" })
	expect(t, "a stranger's key without a token", c.Post(bobPath, "", "", "Idempotency-Key", "b"), http.StatusGone, "sold_out")
	expect(t, "new key after the sell-out", c.Post(alicePath, alice, "", "Idempotency-Key", "twice"), http.StatusGone, "sold_out")
	expect(t, "the held key without a token", c.Post(alicePath, "", "", "Idempotency-Key", "once"), http.StatusUnauthorized, "unauthorized")
	expect(t, "the held key of another user", c.Post(bobPath, bob, "", "Idempotency-Key", "once"), http.StatusGone, "sold_out")
	again = c.Post(alicePath, alice, "", "Idempotency-Key", "once")
	expect(t, "retry once the held keys are loaded", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != first.Str("reservation_id") {
		t.Errorf("retry: reservation %q, want %q", again.Str("reservation_id"), first.Str("reservation_id"))
	}
	if n := remaining(t, "last"); n != 0 {
		t.Errorf("remaining %d, want 0", n)
	}
}

// TestSoldOutPressBeforeIPLimit: a press on a sold-out activity is answered by the flag before
// the IP limit, so an address at its limit still hears the truth and fills no bucket; a held
// win's key and every other call still meet the limit.
func TestSoldOutPressBeforeIPLimit(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nrate_limit ip 1/h burst 2\n"+
		activityBlock("last", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n")
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	alicePath := buyPath(t, c, "last", alice) // the address's first token
	// bob's hash is never checked: the flag answers first.
	bobPath := alicePath[:strings.LastIndexByte(alicePath, '/')+1] + "AAAA"
	expect(t, "win", c.Post(alicePath, alice, "", "Idempotency-Key", "once"), http.StatusAccepted, "queued") // its last token
	expect(t, "another call at the limit", c.Get("/seckill/last", ""), http.StatusTooManyRequests, "rate_limited")
	for i := range 5 {
		expect(t, fmt.Sprintf("press %d after the sell-out", i+1), c.Post(bobPath, bob, ""), http.StatusGone, "sold_out")
	}
	eventually(t, "the held request ids of last loaded", func() (bool, string) { return app(t).Guard().HeldLoaded("last"), "" })
	expect(t, "a key of no held win", c.Post(bobPath, bob, "", "Idempotency-Key", "b"), http.StatusGone, "sold_out")
	expect(t, "the held key at the limit", c.Post(alicePath, alice, "", "Idempotency-Key", "once"), http.StatusTooManyRequests, "rate_limited")
	expect(t, "the path call at the limit", c.Post("/seckill/last/path", bob, ""), http.StatusTooManyRequests, "rate_limited")
	// The IP limit's refusals are counted without the activity's label, the held key's among them
	// although its activity was looked up for the flag.
	out := string(c.Get("/metrics", "").Raw)
	for _, want := range []string{
		`caddy_seckill_requests_total{activity="",call="buy",code="rate_limited"} 1`,
		`caddy_seckill_requests_total{activity="last",call="buy",code="sold_out"} 6`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestReplayKeepsStockReading: a replayed answer carries the stock of its first answer, which is
// stale by then; the status call must keep showing the later, lower reading.
func TestReplayKeepsStockReading(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("two", 2, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	alicePath, bobPath := buyPath(t, c, "two", alice), buyPath(t, c, "two", bob)
	first := c.Post(alicePath, alice, "", "Idempotency-Key", "k")
	expect(t, "alice", first, http.StatusAccepted, "queued")
	expect(t, "bob", c.Post(bobPath, bob, "", "Idempotency-Key", "k"), http.StatusAccepted, "queued")
	again := c.Post(alicePath, alice, "", "Idempotency-Key", "k")
	expect(t, "alice's retry", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != first.Str("reservation_id") || again.Num("remaining") != 1 {
		t.Fatalf("retry = %s, want the first answer (reservation %s, remaining 1)", again, first.Str("reservation_id"))
	}
	st := c.Get("/seckill/two", "")
	if st.Status != http.StatusOK || st.Num("remaining") != 0 || st.Str("state") != "sold_out" {
		t.Errorf("status after the replay = %s, want remaining 0, sold_out", st)
	}
}

// rush runs users buyers: each asks for its path first, then, all at once, every buyer buys tries
// times concurrently, spread over the bases (one per Caddy instance). It checks that exactly stock
// buyers won, each a different user, and that everyone else was told sold_out or limit_reached.
func rush(t *testing.T, bases []string, activity string, users, tries, stock int) {
	t.Helper()
	clients := make([]*client, len(bases))
	for i, b := range bases {
		clients[i] = newClient(t, b)
	}
	toks, paths := make([]string, users), make([]string, users)
	for u := range users {
		toks[u] = token(t, fmt.Sprintf("user-%03d", u))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			p := clients[u%len(clients)].Post("/seckill/"+activity+"/path", toks[u], "")
			if p.Status != http.StatusOK {
				t.Errorf("user-%03d path: %s", u, p)
			}
			paths[u] = p.Str("path")
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	var (
		mu      sync.Mutex
		winners = map[string]int{}
		codes   = map[string]int{}
		gate    = make(chan struct{})
	)
	for u := range users {
		for i := range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				sem <- struct{}{}
				// Alternate instances so that one user's tries race across nodes too.
				r := clients[(u+i)%len(clients)].Post(paths[u], toks[u], "")
				<-sem
				user := fmt.Sprintf("user-%03d", u)
				mu.Lock()
				defer mu.Unlock()
				codes[fmt.Sprintf("%d %s", r.Status, r.Code())]++
				switch {
				case r.Status == http.StatusAccepted && r.Code() == "queued":
					winners[user]++
				case r.Status == http.StatusGone && r.Code() == "sold_out":
				case r.Status == http.StatusConflict && r.Code() == "limit_reached":
				default:
					t.Errorf("%s buy: %s", user, r)
				}
			}()
		}
	}
	close(gate)
	wg.Wait()
	t.Logf("answers: %v", codes)
	if n := codes["202 queued"] + codes["410 sold_out"] + codes["409 limit_reached"]; n != users*tries {
		t.Errorf("%d answers, want %d", n, users*tries)
	}
	if len(winners) != stock {
		t.Errorf("%d users won, want exactly %d", len(winners), stock)
	}
	for u, n := range winners {
		if n != 1 {
			t.Errorf("%s won %d times", u, n)
		}
	}
}

// TestRushMemory: 400 users, 3 concurrent buys each, 50 items, memory store.
func TestRushMemory(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		activityBlock("rush", 50, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	rush(t, []string{base}, "rush", 400, 3, 50)
	if n := remaining(t, "rush"); n != 0 {
		t.Errorf("remaining %d after the rush, want 0", n)
	}
}

// TestRushRedis: the same against a private redis-server.
func TestRushRedis(t *testing.T) {
	rd := testsrv.StartRedis(t)
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret test-url-secret\n"+
		"store redis "+rd.Addr+"\n"+
		activityBlock("rush", 50, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	rush(t, []string{base}, "rush", 400, 3, 50)
	if n := remaining(t, "rush"); n != 0 {
		t.Errorf("remaining %d after the rush, want 0", n)
	}
}

// TestRushRedisAutoPipeline: the same with the Redis calls auto-pipelined.
func TestRushRedisAutoPipeline(t *testing.T) {
	rd := testsrv.StartRedis(t)
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret test-url-secret\n"+
		"store redis "+rd.Addr+" {\nauto_pipeline\n}\n"+
		activityBlock("rush", 50, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	rush(t, []string{base}, "rush", 400, 3, 50)
	if n := remaining(t, "rush"); n != 0 {
		t.Errorf("remaining %d after the rush, want 0", n)
	}
}

// TestRushRedisUnixSocket: the same through a Unix socket, for a Redis on the gateway's own host
// (store redis /path/to/redis.sock: go-redis dials an address that starts with / as a socket).
func TestRushRedisUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	testsrv.StartRedis(t, testsrv.WithArgs("--unixsocket", sock, "--unixsocketperm", "700"))
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret test-url-secret\n"+
		"store redis "+sock+"\n"+
		activityBlock("rush", 50, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	rush(t, []string{base}, "rush", 400, 3, 50)
	if n := remaining(t, "rush"); n != 0 {
		t.Errorf("remaining %d after the rush, want 0", n)
	}
}

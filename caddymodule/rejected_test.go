package caddymodule_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// funnelLayers are the layer label values of caddy_seckill_rejected_total, in funnel order.
var funnelLayers = []string{
	"route", "ip_limit", "window", "sold_out_flag", "jwt", "user_limit", "hashed_url", "waiting_room",
	"captcha_limit", "captcha", "bad_request", "breaker", "store_error", "replicas_ack", "canceled",
	"contended", "store_sold_out", "limit_reached",
}

// funnelScrape is what one scrape says about the funnel: rejected_total by layer (every layer
// must be there, at 0 until it refuses), and the refusals requests_total counts by answer code.
type funnelScrape struct {
	layers  map[string]float64
	refused float64 // requests_total over the codes that are refusals
}

// successCodes are the answer codes of requests_total that are no refusal.
var successCodes = map[string]bool{"ok": true, "queued": true, "none": true}

func scrapeFunnel(t *testing.T, c *client) funnelScrape {
	t.Helper()
	r := c.Get("/metrics", "")
	if r.Status != http.StatusOK {
		t.Fatalf("metrics: %d", r.Status)
	}
	s := funnelScrape{layers: map[string]float64{}}
	sc := bufio.NewScanner(bytes.NewReader(r.Raw))
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		labels, val, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		switch name {
		case "caddy_seckill_rejected_total":
			layer, ok := strings.CutPrefix(labels, `layer="`)
			if !ok {
				t.Fatalf("rejected_total without a layer: %q", line)
			}
			s.layers[strings.TrimSuffix(layer, `"`)] = v
		case "caddy_seckill_requests_total":
			_, code, _ := strings.Cut(labels, `code="`)
			if !successCodes[strings.TrimSuffix(code, `"`)] {
				s.refused += v
			}
		}
	}
	if len(s.layers) != len(funnelLayers) {
		t.Fatalf("rejected_total has %d layers, want %d: %v", len(s.layers), len(funnelLayers), s.layers)
	}
	for _, l := range funnelLayers {
		if _, ok := s.layers[l]; !ok {
			t.Fatalf("rejected_total has no series for layer %s: %v", l, s.layers)
		}
	}
	return s
}

// funnelCheck drives the gateway one step at a time and checks, after each, that
// rejected_total grew by exactly what the step refused, layer by layer, and that every refusal
// requests_total counted was counted at some layer.
type funnelCheck struct {
	t    *testing.T
	c    *client
	last funnelScrape
}

func newFunnelCheck(t *testing.T, c *client) *funnelCheck {
	f := &funnelCheck{t: t, c: c, last: scrapeFunnel(t, c)}
	for l, v := range f.last.layers {
		if v != 0 {
			t.Errorf("layer %s starts at %g, want 0", l, v)
		}
	}
	return f
}

// step runs drive and checks the growth of each layer against want (layers not in want: 0).
func (f *funnelCheck) step(name string, want map[string]float64, drive func()) {
	f.t.Helper()
	drive()
	now := scrapeFunnel(f.t, f.c)
	f.checkDelta(name, now, func(layer string, got float64) bool { return got == want[layer] }, want)
	f.last = now
}

// checkDelta checks each layer's growth with ok, and that the refusals by code and by layer
// grew alike.
func (f *funnelCheck) checkDelta(name string, now funnelScrape, ok func(layer string, got float64) bool, want any) {
	f.t.Helper()
	var sum float64
	for _, l := range funnelLayers {
		d := now.layers[l] - f.last.layers[l]
		sum += d
		if !ok(l, d) {
			f.t.Errorf("%s: layer %s grew by %g; want %v", name, l, d, want)
		}
	}
	if refused := now.refused - f.last.refused; refused != sum {
		f.t.Errorf("%s: %g refusals by answer code, %g by layer: a refusal without a layer", name, refused, sum)
	}
}

// TestRejectedByLayer drives refusals that each hit one layer of the funnel and checks that
// caddy_seckill_rejected_total counts each at its own layer, with every layer present at 0 until
// it refuses.
func TestRejectedByLayer(t *testing.T) {
	rd := testsrv.StartRedis(t)
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	now := time.Now()
	seckill := jwtBlock + "captcha on\nurl_secret u\nstore redis " + rd.Addr + "\nrate_limit user 20/m burst 20\n" +
		activityBlock("m", 3, 2, now.Add(-time.Minute), now.Add(time.Hour), 0) +
		activityBlock("m2", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0) +
		activityBlock("early", 5, 1, now.Add(time.Hour), now.Add(2*time.Hour), time.Minute)
	if err := loadCaddy(t, port, seckill, route+"metrics /metrics\n"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	tok := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "greedy", "spam", "mallory"} {
		tok[u] = token(t, u)
	}
	captcha := func(user, act string) (id, answer string) {
		t.Helper()
		r := c.Post("/seckill/"+act+"/captcha", tok[user], "")
		expect(t, "captcha of "+user, r, http.StatusOK, "ok")
		id = r.Str("captcha_id")
		answer, err := app(t).CaptchaAnswer(context.Background(), id)
		if err != nil {
			t.Fatalf("captcha %s: %v", id, err)
		}
		return id, answer
	}
	pathBody := func(id, ans string) string { return fmt.Sprintf(`{"captcha_id":%q,"answer":%q}`, id, ans) }
	paths := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank"} {
		act := "m"
		if u == "frank" {
			act = "m2"
		}
		id, ans := captcha(u, act)
		r := c.Post("/seckill/"+act+"/path", tok[u], pathBody(id, ans))
		expect(t, "path of "+u, r, http.StatusOK, "ok")
		paths[u] = r.Str("path")
	}

	f := newFunnelCheck(t, c)
	f.step("route", map[string]float64{"route": 3}, func() {
		expect(t, "unknown activity", c.Get("/seckill/nosuch", ""), http.StatusNotFound, "not_found")
		expect(t, "unknown call", c.Get("/seckill/m/nosuch/call", ""), http.StatusNotFound, "not_found")
		expect(t, "wrong method", c.Get(paths["alice"], tok["alice"]), http.StatusMethodNotAllowed, "method_not_allowed")
	})
	f.step("window", map[string]float64{"window": 1}, func() {
		expect(t, "path before reveal", c.Post("/seckill/early/path", tok["alice"], ""), http.StatusForbidden, "not_started")
	})
	f.step("jwt", map[string]float64{"jwt": 2}, func() {
		expect(t, "no token", c.Post("/seckill/m/path", "", ""), http.StatusUnauthorized, "unauthorized")
		expect(t, "bad token", c.Post(paths["alice"], "a.b.c", ""), http.StatusUnauthorized, "unauthorized")
	})
	f.step("captcha_limit", map[string]float64{"captcha_limit": 1}, func() {
		for i := range 3 {
			expect(t, fmt.Sprintf("captcha %d", i+1), c.Post("/seckill/m/captcha", tok["spam"], ""), http.StatusOK, "ok")
		}
		expect(t, "fourth captcha", c.Post("/seckill/m/captcha", tok["spam"], ""), http.StatusTooManyRequests, "rate_limited")
	})
	f.step("captcha", map[string]float64{"captcha": 2}, func() {
		id, ans := captcha("mallory", "m")
		wrong := []byte(ans)
		wrong[0] = '0' + (wrong[0]-'0'+1)%10
		expect(t, "wrong answer", c.Post("/seckill/m/path", tok["mallory"], pathBody(id, string(wrong))), http.StatusForbidden, "captcha_invalid")
		expect(t, "unknown image", c.Get("/seckill/m/captcha/NOSUCHID.png", ""), http.StatusNotFound, "not_found")
	})
	f.step("bad_request", map[string]float64{"bad_request": 3}, func() {
		expect(t, "malformed path body", c.Post("/seckill/m/path", tok["mallory"], "{"), http.StatusBadRequest, "bad_request")
		expect(t, "qty 0", c.Post(paths["alice"], tok["alice"], `{"qty":0}`), http.StatusBadRequest, "bad_request")
		expect(t, "two keys", c.Post(paths["alice"], tok["alice"], "", "Idempotency-Key", "a", "Idempotency-Key", "b"),
			http.StatusBadRequest, "bad_request")
	})
	f.step("hashed_url", map[string]float64{"hashed_url": 2}, func() {
		expect(t, "bob on alice's path", c.Post(paths["alice"], tok["bob"], ""), http.StatusNotFound, "bad_path")
		expect(t, "made-up hash", c.Post("/seckill/m/buy/AAAA", tok["alice"], ""), http.StatusNotFound, "bad_path")
	})
	f.step("user_limit", map[string]float64{"user_limit": 1}, func() {
		for i := range 20 {
			expect(t, fmt.Sprintf("poll %d", i+1), c.Get("/seckill/m/result", tok["greedy"]), http.StatusOK, "none")
		}
		expect(t, "one poll too many", c.Get("/seckill/m/result", tok["greedy"]), http.StatusTooManyRequests, "rate_limited")
	})
	// m: 3 items, 2 per user.
	f.step("limit_reached", map[string]float64{"limit_reached": 1}, func() {
		expect(t, "alice takes 2", c.Post(paths["alice"], tok["alice"], `{"qty":2}`), http.StatusAccepted, "queued")
		expect(t, "alice wants more", c.Post(paths["alice"], tok["alice"], ""), http.StatusConflict, "limit_reached")
	})
	f.step("store_sold_out", map[string]float64{"store_sold_out": 1}, func() {
		// One item left: the store refuses 2, and the node raises no flag (something is left).
		expect(t, "bob wants 2 of 1", c.Post(paths["bob"], tok["bob"], `{"qty":2}`), http.StatusGone, "sold_out")
	})
	f.step("sold_out_flag", map[string]float64{"sold_out_flag": 2}, func() {
		expect(t, "carol takes the last", c.Post(paths["carol"], tok["carol"], ""), http.StatusAccepted, "queued")
		expect(t, "dave after the sell-out", c.Post(paths["dave"], tok["dave"], ""), http.StatusGone, "sold_out")
		expect(t, "path after the sell-out", c.Post("/seckill/m/path", tok["dave"], ""), http.StatusGone, "sold_out")
	})
	// A keyed buy may be a winner's retry: until the Guard has loaded the held request ids it goes
	// to the store; then the flag refuses erin's keys, which are no held win's.
	var flagged bool
	for i := 0; i < 10 && !flagged; i++ {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		expect(t, "erin's keyed buy", c.Post(paths["erin"], tok["erin"], "", "Idempotency-Key", "k"+strconv.Itoa(i)),
			http.StatusGone, "sold_out")
		now := scrapeFunnel(t, c)
		flagged = now.layers["sold_out_flag"]-f.last.layers["sold_out_flag"] == 1
		f.checkDelta("keyed buy", now, func(l string, got float64) bool {
			switch l {
			case "sold_out_flag":
				return got == 1 || got == 0
			case "store_sold_out":
				return got == 1 || (got == 0 && flagged)
			}
			return got == 0
		}, "one of sold_out_flag and store_sold_out")
		f.last = now
	}
	if !flagged {
		t.Error("the Guard's flag never answered a keyed non-holder")
	}

	// The store goes down: the first failures are the store's, then the breaker opens and refuses
	// without calling it. (The Guard's probe of the sold-out activity also counts towards opening
	// the breaker, so the split is not exact.)
	rd.Kill()
	const downBuys = 8
	for range downBuys {
		expect(t, "buy while the store is down", c.Post(paths["frank"], tok["frank"], ""), http.StatusServiceUnavailable, "busy")
	}
	down := scrapeFunnel(t, c)
	f.checkDelta("store down", down, func(l string, got float64) bool {
		switch l {
		case "store_error", "breaker":
			return got >= 1
		}
		return got == 0
	}, "store_error and breaker ≥ 1")
	if got := down.layers["store_error"] + down.layers["breaker"] - f.last.layers["store_error"] - f.last.layers["breaker"]; got != downBuys {
		t.Errorf("store down: store_error + breaker grew by %g, want %d", got, downBuys)
	}

	// The IP limit, on a configuration of its own (a new one starts every layer at 0 again), after
	// a stop: a reload would not move the sale of m, which the dead Redis holds, to store memory.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := loadCaddy(t, port, jwtBlock+"captcha off\nrate_limit ip 2/s burst 2\n"+
		activityBlock("m", 3, 2, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n"); err != nil {
		t.Fatalf("reload: %v", err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c = newClient(t, base)
	ip := newFunnelCheck(t, c) // the scrape is no seckill call: the IP bucket still holds tokens
	ip.step("ip_limit", map[string]float64{"ip_limit": 1}, func() {
		for range 5 {
			if r := c.Get("/seckill/m", ""); r.Status == http.StatusTooManyRequests {
				expect(t, "ip limit", r, http.StatusTooManyRequests, "rate_limited")
				return
			}
		}
		t.Error("the IP limit never refused")
	})
}

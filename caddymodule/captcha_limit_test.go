package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestCaptchaIssueLimit checks the always-on issuance limit with its default (6/m burst 3) and no
// user limit configured: the fourth captcha in a row is a 429 with the rate-limit headers, other
// users and the other calls are not affected, an unchanged reload keeps the buckets and a changed
// issue_rate takes effect.
func TestCaptchaIssueLimit(t *testing.T) {
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	now := time.Now()
	act := activityBlock("cl", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)
	if err := loadCaddy(t, port, jwtBlock+"captcha on\n"+act, route); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")

	var ids []string
	for i := range 3 {
		r := c.Post("/seckill/cl/captcha", alice, "")
		expect(t, fmt.Sprintf("captcha %d", i+1), r, http.StatusOK, "ok")
		ids = append(ids, r.Str("captcha_id"))
	}
	r := c.Post("/seckill/cl/captcha", alice, "")
	expect(t, "fourth captcha", r, http.StatusTooManyRequests, "rate_limited")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 10 {
		t.Errorf("Retry-After %q, want 1-10 s (one captcha every 10 s)", r.Header.Get("Retry-After"))
	}
	if got := r.Header.Get("RateLimit-Policy"); got != "6;w=60;burst=3" {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := r.Header.Get("RateLimit"); !strings.HasPrefix(got, "limit=3, remaining=0, reset=") {
		t.Errorf("RateLimit %q", got)
	}
	expect(t, "bob has his own bucket", c.Post("/seckill/cl/captcha", bob, ""), http.StatusOK, "ok")

	// The captchas alice holds still work: the limit is on issuing, not on answering.
	ans, err := app(t).CaptchaAnswer(context.Background(), ids[0])
	if err != nil {
		t.Fatal(err)
	}
	expect(t, "path with an issued captcha", c.Post("/seckill/cl/path", alice,
		fmt.Sprintf(`{"captcha_id":%q,"answer":%q}`, ids[0], ans)), http.StatusOK, "ok")

	// An unchanged reload keeps the buckets: reloading is no way around the limit.
	if err := loadCaddy(t, port, jwtBlock+"captcha on\n"+act, route); err != nil {
		t.Fatalf("reload: %v", err)
	}
	c.AfterReload()
	expect(t, "after an unchanged reload", c.Post("/seckill/cl/captcha", alice, ""), http.StatusTooManyRequests, "rate_limited")

	// A new issue_rate is a new limiter.
	if err := loadCaddy(t, port, jwtBlock+"captcha on {\n\tissue_rate 1/h\n}\n"+act, route); err != nil {
		t.Fatalf("reload with an issue_rate: %v", err)
	}
	c.AfterReload()
	r = c.Post("/seckill/cl/captcha", alice, "")
	expect(t, "first captcha under 1/h", r, http.StatusOK, "ok")
	r = c.Post("/seckill/cl/captcha", alice, "")
	expect(t, "second captcha under 1/h", r, http.StatusTooManyRequests, "rate_limited")
	if got := r.Header.Get("RateLimit-Policy"); got != "1;w=3600" {
		t.Errorf("RateLimit-Policy %q", got)
	}
}

// TestCaptchaOptions checks that the Caddyfile's captcha options reach the issuer: the number of
// digits, the image size, the audio, the fetch cap (image and audio together) and the lifetime.
func TestCaptchaOptions(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha on {\n\tlength 4\n\twidth 300\n\theight 100\n\taudio_language ja\n"+
		"\tttl 1s\n\tmax_fetches 2\n\tissue_rate 5/m burst 5\n}\n"+
		activityBlock("co", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	c := newClient(t, base)
	alice := token(t, "alice")
	issue := func() (id, img, answer string) {
		t.Helper()
		r := c.Post("/seckill/co/captcha", alice, "")
		if r.Status != http.StatusOK {
			t.Fatalf("captcha: %s", r)
		}
		a, err := app(t).CaptchaAnswer(context.Background(), r.Str("captcha_id"))
		if err != nil {
			t.Fatal(err)
		}
		return r.Str("captcha_id"), r.Str("image"), a
	}
	body := func(id, ans string) string { return fmt.Sprintf(`{"captcha_id":%q,"answer":%q}`, id, ans) }

	id, img, ans := issue()
	if len(ans) != 4 {
		t.Errorf("answer %q: want 4 digits", ans)
	}
	if r := c.Get(img, ""); r.Status != http.StatusOK {
		t.Errorf("first image fetch: %d", r.Status)
	} else if m, err := png.Decode(bytes.NewReader(r.Raw)); err != nil || m.Bounds().Dx() != 300 || m.Bounds().Dy() != 100 {
		t.Errorf("image: %v, want 300x100 (%v)", m.Bounds(), err)
	}
	wav := strings.TrimSuffix(img, ".png") + ".wav"
	if r := c.Get(wav, ""); r.Status != http.StatusOK || r.Header.Get("Content-Type") != "audio/wav" ||
		!bytes.HasPrefix(r.Raw, []byte("RIFF")) || r.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("audio fetch: %d %s % x", r.Status, r.Header, r.Raw[:min(len(r.Raw), 4)])
	}
	expect(t, "third fetch, audio (max_fetches 2)", c.Get(wav, ""), http.StatusNotFound, "not_found")
	expect(t, "third fetch, image (max_fetches 2)", c.Get(img, ""), http.StatusNotFound, "not_found")

	// Past its ttl of 1s, the right answer no longer counts.
	time.Sleep(1200 * time.Millisecond)
	expect(t, "answer after the ttl", c.Post("/seckill/co/path", alice, body(id, ans)), http.StatusForbidden, "captcha_invalid")

	id, _, ans = issue()
	expect(t, "answer within the ttl", c.Post("/seckill/co/path", alice, body(id, ans)), http.StatusOK, "ok")
}

// TestCaptchaProvisionErrors checks the captcha settings the Caddyfile cannot express but JSON
// can: each is refused when the app is provisioned, with a message naming the option.
func TestCaptchaProvisionErrors(t *testing.T) {
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	base, err := adapt(t, caddyfile(t, port, jwtBlock+activityBlock("pe", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		disable bool
		captcha string
		want    string
	}{
		{"length", false, `{"length": 3}`, "captcha length must be between 4 and 10 digits, got 3"},
		{"negative length", false, `{"length": -6}`, "captcha length must be between 4 and 10 digits, got -6"},
		{"ttl", false, `{"ttl": 500000000}`, "captcha ttl must be between 1s and 1h, got 500ms"},
		{"negative max_fetches", false, `{"max_fetches": -1}`, "captcha max fetches must be between 1 and 100, got -1"},
		{"width", false, `{"width": 2000}`, "captcha width must be between 60 and 1000 pixels, got 2000"},
		{"height", false, `{"height": -5}`, "captcha height must be between 20 and 400 pixels, got -5"},
		{"audio_language", false, `{"audio_language": "xx"}`, `captcha audio language must be one of en, ja, pt, ru, zh, got "xx"`},
		{"issue_rate", false, `{"issue_rate": {"rate": "fast"}}`, `captcha issue_rate: rate "fast"`},
		{"issue_rate burst", false, `{"issue_rate": {"rate": "6/m", "burst": -1}}`, "captcha issue_rate: rate \"6/m\" burst -1"},
		{"issue_rate distributed", false, `{"issue_rate": {"rate": "6/m", "distributed": true}}`, "captcha issue_rate is node-local"},
		{"options with the captcha off", true, `{"length": 6}`, "captcha options are given but the captcha is off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg map[string]any
			if err := json.Unmarshal([]byte(base), &cfg); err != nil {
				t.Fatal(err)
			}
			sk := cfg["apps"].(map[string]any)["seckill"].(map[string]any)
			var cc any
			if err := json.Unmarshal([]byte(tc.captcha), &cc); err != nil {
				t.Fatal(err)
			}
			sk["captcha"] = cc
			if tc.disable {
				sk["disable_captcha"] = true
			}
			raw, err := json.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = caddy.Load(raw, true)
			if err == nil {
				_ = caddy.Stop()
				t.Fatalf("load succeeded; want an error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

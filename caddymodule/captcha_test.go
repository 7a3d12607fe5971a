package caddymodule_test

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestFlowWithCaptcha walks the whole public flow of docs/api.md: status, captcha, image, path, buy,
// result, with the captcha on.
func TestFlowWithCaptcha(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha on\n"+
		activityBlock("cap", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 2*time.Second), route)
	c := newClient(t, base)
	alice, bob := token(t, "alice"), token(t, "bob")
	answer := func(id string) string {
		t.Helper()
		a, err := app(t).CaptchaAnswer(context.Background(), id)
		if err != nil {
			t.Fatalf("captcha %s: %v", id, err)
		}
		return a
	}
	pathBody := func(id, ans string) string { return fmt.Sprintf(`{"captcha_id":%q,"answer":%q}`, id, ans) }

	st := c.Get("/seckill/cap", "")
	expect(t, "status", st, http.StatusOK, "ok")
	if st.Num("reveal_ms") != 2000 {
		t.Errorf("status reveal_ms: %s", st)
	}

	expect(t, "captcha without token", c.Post("/seckill/cap/captcha", "", ""), http.StatusUnauthorized, "unauthorized")
	cp := c.Post("/seckill/cap/captcha", alice, "")
	expect(t, "captcha", cp, http.StatusOK, "ok")
	id, img := cp.Str("captcha_id"), cp.Str("image")
	if id == "" || img != "/seckill/cap/captcha/"+id+".png" || cp.Str("audio") != "/seckill/cap/captcha/"+id+".wav" {
		t.Fatalf("captcha answer: %s", cp)
	}

	// The image is a PNG, served without a token, the same bytes on every fetch, a few times only.
	first := c.Get(img, "")
	if first.Status != http.StatusOK || first.Header.Get("Content-Type") != "image/png" {
		t.Fatalf("image: %d %s", first.Status, first.Header.Get("Content-Type"))
	}
	if _, err := png.Decode(bytes.NewReader(first.Raw)); err != nil {
		t.Fatalf("image is not a PNG: %v", err)
	}
	var capped bool
	for range 10 {
		r := c.Get(img, "")
		if r.Status == http.StatusOK && !bytes.Equal(r.Raw, first.Raw) {
			t.Fatal("the image changed between fetches")
		}
		if r.Status == http.StatusNotFound && r.Code() == "not_found" {
			capped = true
			break
		}
	}
	if !capped {
		t.Error("image fetches are not capped")
	}
	expect(t, "unknown image", c.Get("/seckill/cap/captcha/NOSUCHID.png", ""), http.StatusNotFound, "not_found")
	expect(t, "unknown audio", c.Get("/seckill/cap/captcha/NOSUCHID.wav", ""), http.StatusNotFound, "not_found")
	// The image's fetches used this captcha's cap up, its audio's too.
	expect(t, "audio of a capped captcha", c.Get(cp.Str("audio"), ""), http.StatusNotFound, "not_found")

	// Bad answers: missing body, malformed, wrong digits, someone else's captcha. A captcha is
	// single use: its owner's wrong answer burns it (another user's does not: TestCaptchaBoundToOwner).
	expect(t, "path without body", c.Post("/seckill/cap/path", alice, ""), http.StatusBadRequest, "bad_request")
	expect(t, "path malformed", c.Post("/seckill/cap/path", alice, "{"), http.StatusBadRequest, "bad_request")
	right := answer(id)
	wrong := []byte(right)
	wrong[0] = '0' + (wrong[0]-'0'+1)%10
	expect(t, "wrong answer", c.Post("/seckill/cap/path", alice, pathBody(id, string(wrong))), http.StatusForbidden, "captcha_invalid")
	expect(t, "right answer after a wrong one", c.Post("/seckill/cap/path", alice, pathBody(id, right)), http.StatusForbidden, "captcha_invalid")

	bobCap := c.Post("/seckill/cap/captcha", bob, "")
	bobID := bobCap.Str("captcha_id")
	expect(t, "another user's captcha", c.Post("/seckill/cap/path", alice, pathBody(bobID, answer(bobID))), http.StatusForbidden, "captcha_invalid")

	// The right answer gets the path, once.
	cp = c.Post("/seckill/cap/captcha", alice, "")
	id = cp.Str("captcha_id")
	right = answer(id)
	p := c.Post("/seckill/cap/path", alice, pathBody(id, right))
	expect(t, "path", p, http.StatusOK, "ok")
	path := p.Str("path")
	if !strings.HasPrefix(path, "/seckill/cap/buy/") {
		t.Fatalf("path %q", path)
	}
	expect(t, "captcha reuse", c.Post("/seckill/cap/path", alice, pathBody(id, right)), http.StatusForbidden, "captcha_invalid")

	expect(t, "result before", c.Get("/seckill/cap/result", alice), http.StatusOK, "none")
	b := c.Post(path, alice, `{"qty":1}`)
	expect(t, "buy", b, http.StatusAccepted, "queued")
	r := c.Get("/seckill/cap/result", alice)
	expect(t, "result after", r, http.StatusOK, "queued")
	if r.Str("reservation_id") != b.Str("reservation_id") {
		t.Errorf("result %s does not name the reservation of %s", r, b)
	}
	if n := remaining(t, "cap"); n != 2 {
		t.Errorf("remaining %d, want 2", n)
	}
}

// TestCaptchaBoundToOwner: a captcha is bound to the user it was issued to and to its activity.
// Another user who posts its id (it is in the image URL, which needs no token) is refused and does
// not use it up; neither does its owner on another activity (issue 32, item 7). On both stores.
func TestCaptchaBoundToOwner(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			now := time.Now()
			global := jwtBlock + "captcha on\n"
			if store == "redis" {
				global += "url_secret u\nstore redis " + testsrv.StartRedis(t).Addr + "\n"
			}
			base := startCaddy(t, global+
				activityBlock("x", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)+
				activityBlock("y", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
			c := newClient(t, base)
			alice, bob := token(t, "alice"), token(t, "bob")
			pathBody := func(id, ans string) string { return fmt.Sprintf(`{"captcha_id":%q,"answer":%q}`, id, ans) }

			id := c.Post("/seckill/x/captcha", alice, "").Str("captcha_id")
			right, err := app(t).CaptchaAnswer(context.Background(), id)
			if err != nil {
				t.Fatalf("captcha %s: %v", id, err)
			}
			wrong := []byte(right)
			wrong[0] = '0' + (wrong[0]-'0'+1)%10

			// Bob, with alice's id, a wrong and the right answer, on her activity and another:
			// refused, and alice still solves her captcha, once.
			for _, ans := range []string{string(wrong), right} {
				for _, act := range []string{"x", "y"} {
					expect(t, "bob with alice's captcha on "+act, c.Post("/seckill/"+act+"/path", bob, pathBody(id, ans)),
						http.StatusForbidden, "captcha_invalid")
				}
			}
			p := c.Post("/seckill/x/path", alice, pathBody(id, right))
			expect(t, "alice after bob's attempts", p, http.StatusOK, "ok")
			if !strings.HasPrefix(p.Str("path"), "/seckill/x/buy/") {
				t.Errorf("path %q", p.Str("path"))
			}
			expect(t, "alice again", c.Post("/seckill/x/path", alice, pathBody(id, right)), http.StatusForbidden, "captcha_invalid")

			// A captcha issued on x is refused on y, even to its owner with the right answer, and
			// stays good on x.
			id = c.Post("/seckill/x/captcha", alice, "").Str("captcha_id")
			if right, err = app(t).CaptchaAnswer(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			expect(t, "alice's captcha of x on y", c.Post("/seckill/y/path", alice, pathBody(id, right)),
				http.StatusForbidden, "captcha_invalid")
			expect(t, "alice's captcha of x on x", c.Post("/seckill/x/path", alice, pathBody(id, right)), http.StatusOK, "ok")

			// Her wrong answer still uses the captcha up.
			id = c.Post("/seckill/x/captcha", alice, "").Str("captcha_id")
			if right, err = app(t).CaptchaAnswer(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			wrong = []byte(right)
			wrong[0] = '0' + (wrong[0]-'0'+1)%10
			expect(t, "alice's wrong answer", c.Post("/seckill/x/path", alice, pathBody(id, string(wrong))), http.StatusForbidden, "captcha_invalid")
			expect(t, "alice's right answer after it", c.Post("/seckill/x/path", alice, pathBody(id, right)), http.StatusForbidden, "captcha_invalid")
		})
	}
}

package caddymodule_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestMountBehindHandlePath serves the API under another prefix that handle_path strips: the
// image URL and the buy path handed out must be the public ones.
func TestMountBehindHandlePath(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha on\n"+
		activityBlock("m1", 2, 1, now.Add(-time.Minute), now.Add(time.Hour), 0),
		"handle_path /api/sale/* {\n\tseckill {\n\t\tprefix /\n\t}\n}\n")
	c := newClient(t, base)
	alice := token(t, "alice")
	expect(t, "status", c.Get("/api/sale/m1", ""), http.StatusOK, "ok")
	cp := c.Post("/api/sale/m1/captcha", alice, "")
	id := cp.Str("captcha_id")
	if cp.Str("image") != "/api/sale/m1/captcha/"+id+".png" {
		t.Fatalf("image URL: %s", cp)
	}
	if r := c.Get(cp.Str("image"), ""); r.Status != http.StatusOK {
		t.Fatalf("image: %d", r.Status)
	}
	ans, err := app(t).CaptchaAnswer(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	p := c.Post("/api/sale/m1/path", alice, fmt.Sprintf(`{"captcha_id":%q,"answer":%q}`, id, ans))
	expect(t, "path", p, http.StatusOK, "ok")
	if len(p.Str("path")) < len("/api/sale/m1/buy/x") || p.Str("path")[:len("/api/sale/m1/buy/")] != "/api/sale/m1/buy/" {
		t.Fatalf("path: %s", p)
	}
	expect(t, "buy", c.Post(p.Str("path"), alice, ""), http.StatusAccepted, "queued")
}

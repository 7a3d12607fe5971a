package caddymodule_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// TestDemoSignin signs buyers in through seckill_demo_signin: the token carries the app's issuer,
// audience and user claim and the edge accepts it; remote clients are refused unless allow names
// them (any, private networks, CIDR ranges); bad input is a 4xx.
func TestDemoSignin(t *testing.T) {
	port := freePort(t)
	now := time.Now()
	jwt := "jwt {\n\talgorithms HS256\n\thmac_secret test-jwt-secret-0123456789abcdef\n\tissuer shop\n\taudience seckill\n\tuser_claim uid\n}\n"
	text := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	http_port %d
	storage file_system %s
	log {
		level ERROR
	}
	servers {
		trusted_proxies static 127.0.0.1/32
		client_ip_headers X-Forwarded-For
	}
	seckill {
%s
	}
}

http://127.0.0.1:%d {
%s
	route /demo/token {
		seckill_demo_signin
	}
	route /demo/open {
		seckill_demo_signin {
			allow any
		}
	}
	route /demo/private {
		seckill_demo_signin {
			allow private
		}
	}
	route /demo/net {
		seckill_demo_signin {
			allow loopback 203.0.113.0/24 2001:db8::/32
		}
	}
}
`, port, t.TempDir(), jwt+"captcha off\n"+activityBlock("d", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), port, route)
	runCaddyfile(t, text)
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))

	r := c.Post("/demo/token", "", `{"user":"alice.b_1-x"}`)
	if r.Status != http.StatusOK || r.Str("user") != "alice.b_1-x" || r.Str("token") == "" {
		t.Fatalf("sign-in: %s", r)
	}
	if got := r.Header.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control %q", got)
	}
	v, err := jwtauth.New(jwtauth.Config{Algorithms: []string{"HS256"}, HMACSecret: jwtSecret,
		Issuer: "shop", Audience: "seckill", UserClaim: "uid"})
	if err != nil {
		t.Fatal(err)
	}
	claims, err := v.Verify(context.Background(), r.Str("token"))
	if err != nil || claims.User != "alice.b_1-x" {
		t.Fatalf("minted token: %+v, %v", claims, err)
	}
	if claims.ExpiresAt.UnixMilli() != r.Num("expires_ms") ||
		claims.ExpiresAt.Before(now.Add(59*time.Minute)) || claims.ExpiresAt.After(time.Now().Add(61*time.Minute)) {
		t.Errorf("expires_ms %d, token exp %s: want an hour from now", r.Num("expires_ms"), claims.ExpiresAt)
	}
	expect(t, "the edge accepts the token", c.Get("/seckill/d/result", r.Str("token")), http.StatusOK, "none")

	remote := []string{"X-Forwarded-For", "203.0.113.7"}
	expect(t, "remote client", c.Do(http.MethodPost, "/demo/token", "", strings.NewReader(`{"user":"alice"}`), remote...),
		http.StatusForbidden, "forbidden")
	expect(t, "remote client, GET", c.Do(http.MethodGet, "/demo/token", "", nil, remote...), http.StatusForbidden, "forbidden")
	for _, tc := range []struct {
		route, client string
		ok            bool
	}{
		{"/demo/open", "203.0.113.7", true},
		{"/demo/private", "203.0.113.7", false},
		{"/demo/private", "10.1.2.3", true},
		{"/demo/private", "172.17.0.1", true}, // a Docker host's bridge, as `-p 8080:8080` forwards it
		{"/demo/private", "fd00::1", true},
		{"/demo/net", "203.0.113.7", true},
		{"/demo/net", "2001:db8::7", true},
		{"/demo/net", "10.1.2.3", false},
		{"/demo/net", "127.0.0.1", true},
	} {
		r := c.Do(http.MethodPost, tc.route, "", strings.NewReader(`{"user":"bob"}`), "X-Forwarded-For", tc.client)
		if tc.ok && (r.Status != http.StatusOK || r.Str("user") != "bob") {
			t.Errorf("%s from %s: %s, want a token", tc.route, tc.client, r)
		}
		if !tc.ok {
			expect(t, tc.route+" from "+tc.client, r, http.StatusForbidden, "forbidden")
		}
	}

	m := c.Get("/demo/token", "")
	expect(t, "GET", m, http.StatusMethodNotAllowed, "method_not_allowed")
	if m.Header.Get("Allow") != http.MethodPost {
		t.Errorf("Allow %q", m.Header.Get("Allow"))
	}
	for _, tc := range []struct{ name, body string }{
		{"empty body", ""},
		{"not JSON", "alice"},
		{"no user", `{}`},
		{"empty user", `{"user":""}`},
		{"space", `{"user":"a b"}`},
		{"slash", `{"user":"a/b"}`},
		{"unicode", `{"user":"ålice"}`},
		{"too long", `{"user":"` + strings.Repeat("a", 65) + `"}`},
		{"number", `{"user":7}`},
		{"unknown field", `{"user":"a","admin":true}`},
		{"two documents", `{"user":"a"}{"user":"b"}`},
	} {
		expect(t, tc.name, c.Post("/demo/token", "", tc.body), http.StatusBadRequest, "bad_request")
	}
	if r := c.Post("/demo/token", "", `{"user":"`+strings.Repeat("a", 64)+`"}`); r.Status != http.StatusOK {
		t.Errorf("64-byte user: %s", r)
	}
	expect(t, "large body", c.Post("/demo/token", "", `{"user":"a","x":"`+strings.Repeat("x", 5000)+`"}`),
		http.StatusRequestEntityTooLarge, "bad_request")
}

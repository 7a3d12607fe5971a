package webhookpay

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestProvision: the secret is read from its placeholder at start; a missing or short secret, a
// URL that is not absolute http(s) and a negative tolerance are errors naming the option.
func TestProvision(t *testing.T) {
	t.Setenv("SECKILL_TEST_WEBHOOK_SECRET", "0123456789abcdef0123")
	m := Module{URL: "https://pay.shop.example/seckill", Secret: "{env.SECKILL_TEST_WEBHOOK_SECRET}"}
	if err := m.Provision(caddy.Context{}); err != nil || m.secret != "0123456789abcdef0123" {
		t.Fatalf("provision = %v, secret %q", err, m.secret)
	}
	for _, c := range []struct {
		m    Module
		want string
	}{
		{Module{URL: "https://pay.shop.example", Secret: "{env.SECKILL_TEST_WEBHOOK_UNSET}"}, "secret (\"{env.SECKILL_TEST_WEBHOOK_UNSET}\"): 0 bytes"},
		{Module{URL: "https://pay.shop.example", Secret: "short"}, "5 bytes: want at least 16"},
		{Module{URL: "pay.shop.example", Secret: "0123456789abcdef"}, `url "pay.shop.example" is not an absolute http(s) URL`},
		{Module{Secret: "0123456789abcdef"}, `url "" is not`},
		{Module{URL: "https://pay.shop.example", Secret: "0123456789abcdef", Tolerance: -1}, "tolerance -1ns is negative"},
	} {
		if err := c.m.Provision(caddy.Context{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("provision %+v = %v; want %q", c.m, err, c.want)
		}
	}
}

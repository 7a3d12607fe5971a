package stripepay

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestProvision: the secret key is read from its placeholder at start, and an empty one or an
// api_base that is not an http(s) URL is an error naming the option.
func TestProvision(t *testing.T) {
	t.Setenv("SECKILL_TEST_STRIPE_KEY", "sk_test_from_env")
	t.Setenv("SECKILL_TEST_STRIPE_WHSEC", "whsec_from_env")
	m := Module{SecretKey: "{env.SECKILL_TEST_STRIPE_KEY}", APIBase: "http://127.0.0.1:12111", WebhookSecret: "{env.SECKILL_TEST_STRIPE_WHSEC}"}
	if err := m.Provision(caddy.Context{}); err != nil || m.key != "sk_test_from_env" || m.whsec != "whsec_from_env" {
		t.Fatalf("provision = %v, key %q, webhook secret %q", err, m.key, m.whsec)
	}
	for _, c := range []struct {
		m    Module
		want string
	}{
		{Module{SecretKey: "{env.SECKILL_TEST_STRIPE_UNSET}"}, "secret_key is empty"},
		{Module{}, "secret_key is empty"},
		{Module{SecretKey: "k", APIBase: "api.stripe.com"}, `api_base "api.stripe.com" is not an http(s) URL`},
		{Module{SecretKey: "k", APIBase: "https://api.stripe.com?x=1"}, "is not an http(s) URL"},
		{Module{SecretKey: "k", WebhookSecret: "{env.SECKILL_TEST_STRIPE_UNSET}"}, "webhook_secret is empty"},
		{Module{SecretKey: "k", WebhookTolerance: -1}, "webhook_tolerance -1ns is negative"},
	} {
		if err := c.m.Provision(caddy.Context{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("provision %+v = %v; want %q", c.m, err, c.want)
		}
	}
}

package caddymodule_test

import (
	"strings"
	"testing"
)

// TestOrdersPaymentsBad: a provider that is not registered, or one given options it does not
// take, is a configuration error naming the line.
func TestOrdersPaymentsBad(t *testing.T) {
	for _, tc := range []struct{ payments, want, line string }{
		{"payments", "orders payments: want a provider: one of mock, stripe", "Caddyfile:4"},
		{"payments paypal", `unknown payments provider "paypal": want one of mock, stripe, webhook`, "Caddyfile:4"},
		{"payments mock now", `payments mock: unexpected "now"`, "Caddyfile:4"},
		{"payments mock {\n\t\t\t\tkey x\n\t\t\t}", "payments mock: unexpected block", "Caddyfile:5"},
		{"payments stripe", "payments stripe: secret_key is required", "Caddyfile:4"},
		{"payments stripe {\n\t\t\t\tapi_base http://127.0.0.1:12111\n\t\t\t}", "payments stripe: secret_key is required", "Caddyfile:4"},
		{"payments stripe {\n\t\t\t\tsecret_key {$SECKILL_UNSET_STRIPE_KEY}\n\t\t\t}", "payments stripe secret_key has no value", "Caddyfile:5"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\tapi_base ftp://stripe\n\t\t\t}", `api_base "ftp://stripe" is not an http(s) URL`, "Caddyfile:6"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\tapi_base stripe.example\n\t\t\t}", `api_base "stripe.example" is not an http(s) URL`, "Caddyfile:6"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\tsecret_key l\n\t\t\t}", "payments stripe: secret_key is given twice", "Caddyfile:6"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\twebhook_key w\n\t\t\t}", `payments stripe: unknown option "webhook_key"`, "Caddyfile:6"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\twebhook_secret w\n\t\t\t\twebhook_secret v\n\t\t\t}", "payments stripe: webhook_secret is given twice", "Caddyfile:7"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\twebhook_secret\n\t\t\t}", "payments stripe webhook_secret has no value", "Caddyfile:6"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\twebhook_tolerance 0s\n\t\t\t}", "payments stripe webhook_tolerance must be positive", "Caddyfile:6"},
		{"payments stripe {\n\t\t\t\tsecret_key k\n\t\t\t\twebhook_tolerance soon\n\t\t\t}", `payments stripe webhook_tolerance "soon"`, "Caddyfile:6"},
		{"payments stripe sk_live_x", `payments stripe: unexpected "sk_live_x"`, "Caddyfile:4"},
		{"payments webhook", "payments webhook: url is required", "Caddyfile:4"},
		{"payments webhook {\n\t\t\t\turl https://pay.shop.example\n\t\t\t}", "payments webhook: secret is required", "Caddyfile:4"},
		{"payments webhook {\n\t\t\t\tsecret 0123456789abcdef\n\t\t\t}", "payments webhook: url is required", "Caddyfile:4"},
		{"payments webhook {\n\t\t\t\turl pay.shop.example\n\t\t\t}", `url "pay.shop.example" is not an absolute http(s) URL`, "Caddyfile:5"},
		{"payments webhook {\n\t\t\t\turl https://pay.shop.example\n\t\t\t\tsecret short\n\t\t\t}", "payments webhook: secret: 5 bytes: want at least 16", "Caddyfile:6"},
		{"payments webhook {\n\t\t\t\turl https://pay.shop.example\n\t\t\t\turl https://pay.shop.example\n\t\t\t}", "payments webhook: url is given twice", "Caddyfile:6"},
		{"payments webhook {\n\t\t\t\turl https://pay.shop.example\n\t\t\t\tsecret 0123456789abcdef\n\t\t\t\ttolerance -1m\n\t\t\t}", `payments webhook tolerance "-1m" is negative`, "Caddyfile:7"},
		{"payments webhook {\n\t\t\t\turl https://pay.shop.example\n\t\t\t\tsecret 0123456789abcdef\n\t\t\t\tkey x\n\t\t\t}", `payments webhook: unknown option "key"`, "Caddyfile:7"},
	} {
		t.Run(tc.payments, func(t *testing.T) {
			_, err := adapt(t, "{\n\tseckill {\n\t\torders sqlite o.db {\n\t\t\t"+tc.payments+"\n\t\t}\n\t}\n}\n")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("error %v; want %q at %s", err, tc.want, tc.line)
			}
		})
	}
}

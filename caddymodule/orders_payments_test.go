package caddymodule_test

import (
	"fmt"
	"path/filepath"
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

// TestMockPaymentsWarning runs Caddy with the embedded order backend and reads its log: payments
// mock (the default) on a listener of every interface logs the warning naming that listener;
// bound to loopback it does not, and neither does a provider that takes money on every interface.
func TestMockPaymentsWarning(t *testing.T) {
	const warning = "the payment provider takes no money"
	for _, tc := range []struct {
		name, bind, payments string
		warned               bool
	}{
		{"mock on every interface", "", "", true},
		{"mock on loopback", "bind 127.0.0.1", "", false},
		{"webhook on every interface", "", "\tpayments webhook {\n\t\turl https://pay.shop.example\n\t\tsecret 0123456789abcdef\n\t}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, dir := freePort(t), t.TempDir()
			logFile := filepath.Join(dir, "caddy.log")
			orders := "orders sqlite " + filepath.Join(dir, "orders.db") + " {\n" + tc.payments + "}\n"
			runCaddyfile(t, fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		output file %s
		level WARN
	}
	seckill {
%s
		captcha off
%s
	}
}

http://:%d {
	%s
%s
}
`, dir, logFile, jwtBlock, orders, port, tc.bind, ordersSite))
			warned, b := logEntries(t, logFile, warning)
			if !tc.warned {
				if len(warned) != 0 {
					t.Fatalf("warned %v", warned)
				}
				return
			}
			if len(warned) != 1 {
				t.Fatalf("%d warnings %q, want 1; log:\n%s", len(warned), warning, b)
			}
			e := warned[0]
			if e["level"] != "warn" || e["provider"] != "seckill.payments.mock" ||
				fmt.Sprint(e["listen"]) != fmt.Sprintf("[:%d]", port) {
				t.Errorf("warning %v: want level warn, provider seckill.payments.mock, listen [:%d]", e, port)
			}
		})
	}
}

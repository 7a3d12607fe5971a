package caddymodule_test

import (
	"strings"
	"testing"
)

// TestOrdersPaymentsBad: a provider that is not registered, or one given options it does not
// take, is a configuration error naming the line.
func TestOrdersPaymentsBad(t *testing.T) {
	for _, tc := range []struct{ payments, want, line string }{
		{"payments", "orders payments: want a provider: one of mock", "Caddyfile:4"},
		{"payments paypal", `unknown payments provider "paypal": want one of mock`, "Caddyfile:4"},
		{"payments mock now", `payments mock: unexpected "now"`, "Caddyfile:4"},
		{"payments mock {\n\t\t\t\tkey x\n\t\t\t}", "payments mock: unexpected block", "Caddyfile:5"},
	} {
		t.Run(tc.payments, func(t *testing.T) {
			_, err := adapt(t, "{\n\tseckill {\n\t\torders sqlite o.db {\n\t\t\t"+tc.payments+"\n\t\t}\n\t}\n}\n")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.line) {
				t.Fatalf("error %v; want %q at %s", err, tc.want, tc.line)
			}
		})
	}
}

package caddymodule_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// TestActivityConfigJSON validates JSON configurations (caddy.Validate: the app is provisioned,
// nothing started): every option of an activity is checked whatever the others hold, start_in
// included, and the error names the option.
func TestActivityConfigJSON(t *testing.T) {
	const end = `"end": "2036-01-01T00:00:00Z"`
	for _, tc := range []struct {
		name, activity, want string // want "": valid
	}{
		{"start", `{"stock": 5, "start": "2026-01-01T00:00:00Z", ` + end + `, "reveal": "1m", "pay_within": "5m"}`, ""},
		{"start_in", `{"stock": 5, "start_in": "30s", ` + end + `, "reveal": "10s", "pay_within": "5m"}`, ""},
		{"start_in reveal negative", `{"stock": 5, "start_in": "30s", ` + end + `, "reveal": "-1s"}`, "activity a: reveal -1s is negative"},
		{"start_in pay_within negative", `{"stock": 5, "start_in": "30s", ` + end + `, "pay_within": "-1m"}`, "activity a: pay_within -1m0s is negative"},
		{"start_in stock negative", `{"stock": -1, "start_in": "30s", ` + end + `}`, "activity a: stock -1 is negative"},
		{"start_in limit negative", `{"stock": 5, "limit": -2, "start_in": "30s", ` + end + `}`, "activity a: limit -2 is negative"},
		{"start_in buckets above stock", `{"stock": 3, "start_in": "30s", ` + end + `, "buckets": 4}`, "activity a: buckets 4 is more than the stock 3"},
		{"start_in negative", `{"stock": 5, "start_in": "-30s", ` + end + `}`, "activity a: start_in -30s is negative"},
		{"start_in and start", `{"stock": 5, "start_in": "30s", "start": "2026-01-01T00:00:00Z", ` + end + `}`, "activity a: start and start_in are exclusive"},
		{"start_in no end", `{"stock": 5, "start_in": "30s"}`, "activity a: start (or start_in) and end are required"},
		{"reveal negative", `{"stock": 5, "start": "2026-01-01T00:00:00Z", ` + end + `, "reveal": "-1s"}`, "activity a: reveal -1s is negative"},
		{"pay_within negative", `{"stock": 5, "start": "2026-01-01T00:00:00Z", ` + end + `, "pay_within": "-1s"}`, "activity a: pay_within -1s is negative"},
		{"price", `{"stock": 5, "start_in": "30s", ` + end + `, "price": {"amount": 19900, "currency": "USD"}, "title": "Demo Phone"}`, ""},
		{"price zero", `{"stock": 5, "start_in": "30s", ` + end + `, "price": {"amount": 0, "currency": "USD"}}`, "activity a: price: amount 0 (minor units) must be positive"},
		{"price negative", `{"stock": 5, "start_in": "30s", ` + end + `, "price": {"amount": -100, "currency": "EUR"}}`, "activity a: price: amount -100 (minor units) must be positive"},
		{"price too large", `{"stock": 5, "start_in": "30s", ` + end + `, "price": {"amount": 1000000000000000001, "currency": "EUR"}}`, "must be positive and at most 1000000000000000"},
		{"price currency", `{"stock": 5, "start_in": "30s", ` + end + `, "price": {"amount": 100, "currency": "usd"}}`, `activity a: price: currency "usd" is not an ISO 4217 code in upper case`},
		{"price no currency", `{"stock": 5, "start_in": "30s", ` + end + `, "price": {"amount": 100}}`, `activity a: price: currency "" is not`},
		{"title control", `{"stock": 5, "start_in": "30s", ` + end + `, "title": "a\u0007b"}`, "activity a: title: contains a control character"},
		{"title long", `{"stock": 5, "start_in": "30s", ` + end + `, "title": "` + strings.Repeat("é", 101) + `"}`, "activity a: title: 202 bytes is longer than 200"},
		{"waiting_room defaults", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {}}`, ""},
		{"waiting_room", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {"opens": "15m", "admit": "200/s", "session": "2m", "proof_of_work": 18}}`, ""},
		{"waiting_room opens negative", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {"opens": "-1m"}}`, "activity a: waiting_room: opens -1m0s is negative"},
		{"waiting_room opens too long", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {"opens": "200h"}}`, "activity a: waiting_room: opens 200h0m0s: want 1s to 168h0m0s"},
		{"waiting_room admit", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {"admit": "fast"}}`, `activity a: waiting_room: admit "fast"`},
		{"waiting_room session", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {"session": "100ms"}}`, "activity a: waiting_room: session 100ms: want 1s to 24h0m0s"},
		{"waiting_room proof_of_work", `{"stock": 5, "start_in": "30s", ` + end + `, "waiting_room": {"proof_of_work": 29}}`, "activity a: waiting_room: proof_of_work 29: want 1 to 28 bits"},
		{"end before start", `{"stock": 5, "start": "2037-01-01T00:00:00Z", ` + end + `}`, "activity a: end 2036-01-01T00:00:00Z is not after start 2037-01-01T00:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := `{"admin": {"disabled": true}, "apps": {"seckill": {"activities": {"a": ` + tc.activity + `}}}}`
			var cfg caddy.Config
			if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
				t.Fatal(err)
			}
			err := caddy.Validate(&cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid activity %s refused: %v", tc.activity, err)
			case tc.want != "" && err == nil:
				t.Fatalf("activity %s accepted; want an error containing %q", tc.activity, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/forwardsig"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestForwardReplaySignsWonQty: with forward, a keyed retry of a win is forwarded again, and its
// signed Seckill-Qty must be the qty that was won, never the retry's body's: a buyer who won 1
// item and retries the key with {"qty":5} must not hand the shop a valid signature for 5 items
// of a reservation that holds 1 (the shop takes the quantity from Seckill-Qty). The retry still
// gets the first answer (same reservation, no stock taken). Through real Caddy, with a shop
// behind reverse_proxy that verifies the signature, on each store that replays.
func TestForwardReplaySignsWonQty(t *testing.T) {
	// The shop answers what it verified: the reservation and the signed qty.
	shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		win, ok := forwardsig.Verify(r.Header, []byte("fwd-secret"))
		if !ok {
			http.Error(w, "bad signature", http.StatusForbidden)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"reservation": win.Reservation, "qty": win.Qty})
	}))
	t.Cleanup(shop.Close)
	site := "route /seckill/* {\n\tseckill {\n\t\tforward\n\t}\n\treverse_proxy " +
		strings.TrimPrefix(shop.URL, "http://") + "\n}\n"
	now := time.Now()
	block := func(extra string) string {
		return fmt.Sprintf("activity fr {\n\tstock 10\n\tlimit 5\n\tstart %s\n\tend %s\n%s}\n",
			rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), extra)
	}

	for _, tc := range []struct{ name, store, activity string }{
		{"memory", "", block("")},
		{"redis", "store redis " + testsrv.StartRedis(t).Addr + "\n", block("")},
		{"redis buckets", "store redis " + testsrv.StartRedis(t).Addr + "\n", block("\tbuckets 2\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := startCaddy(t, jwtBlock+"captcha off\nurl_secret "+fuzzURLSecret+"\nforward_secret fwd-secret\n"+tc.store+tc.activity, site)
			c := newClient(t, base)
			for _, b := range []struct {
				user, key, first, retry string
				won                     int64
			}{
				{"alice", "k-alice", `{"qty":1}`, `{"qty":5}`, 1},
				{"bob", "k-bob", `{"qty":3}`, ``, 3}, // the retry without a body asks for 1
			} {
				tok := token(t, b.user)
				path := buyPath(t, c, "fr", tok)
				first := c.Post(path, tok, b.first, "Idempotency-Key", b.key)
				if first.Status != http.StatusCreated || first.Num("qty") != b.won || first.Str("reservation") == "" {
					t.Fatalf("%s's win: %s", b.user, first)
				}
				again := c.Post(path, tok, b.retry, "Idempotency-Key", b.key)
				if again.Status != http.StatusCreated || again.Str("reservation") != first.Str("reservation") {
					t.Fatalf("%s's retry is not the replay of the win %s: %s", b.user, first, again)
				}
				if got := again.Num("qty"); got != b.won {
					t.Errorf("%s won %d item(s) and retried with body %q: the shop got a signed Seckill-Qty %d for reservation %s",
						b.user, b.won, b.retry, got, again.Str("reservation"))
				}
			}
			if got := remaining(t, "fr"); got != 6 {
				t.Errorf("remaining %d, want 6: the retries took nothing", got)
			}
		})
	}
}

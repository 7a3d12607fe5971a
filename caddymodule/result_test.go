package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestResultAnswer pins the result call's body byte for byte, with each store: the record as
// encoding/json encodes it followed by a newline (what the handler wrote when it encoded a
// struct), whether the store hands its stored text on (Redis) or encodes the record (memory).
func TestResultAnswer(t *testing.T) {
	stores := map[string]func(t *testing.T) string{
		"memory": func(*testing.T) string { return "" },
		"redis":  func(t *testing.T) string { return "store redis " + testsrv.StartRedis(t).Addr + "\n" },
		"redis_autopipeline": func(t *testing.T) string {
			return "store redis " + testsrv.StartRedis(t).Addr + " {\nauto_pipeline\n}\n"
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			base := startCaddy(t, jwtBlock+"captcha off\nurl_secret test-url-secret\n"+store(t)+
				activityBlock("res", 5, 2, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
			c := newClient(t, base)
			alice := token(t, "alice")
			check := func(what string, want admission.Result) {
				t.Helper()
				var enc bytes.Buffer
				if err := json.NewEncoder(&enc).Encode(want); err != nil {
					t.Fatal(err)
				}
				r := c.Get("/seckill/res/result", alice)
				if r.Status != http.StatusOK || string(r.Raw) != enc.String() {
					t.Errorf("%s: answered %d %q, want 200 %q", what, r.Status, r.Raw, enc.String())
				}
				if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Content-Length") != strconv.Itoa(enc.Len()) ||
					r.Header.Get("Cache-Control") != "no-store" {
					t.Errorf("%s: headers %v", what, r.Header)
				}
			}

			check("before buying", admission.Result{Code: "none"})
			path := buyPath(t, c, "res", alice)
			b := c.Post(path, alice, "")
			expect(t, "buy", b, http.StatusAccepted, "queued")
			check("after the win", admission.Result{Code: "queued", ReservationID: b.Str("reservation_id")})
			ctx := context.Background()
			paid := admission.Result{Code: "paid", ReservationID: b.Str("reservation_id"), OrderID: `o<"&\>é`}
			for _, rec := range []admission.Result{
				{Code: "pending_payment", ReservationID: b.Str("reservation_id"), OrderID: "o-1", PayBeforeMS: now.Add(15 * time.Minute).UnixMilli()},
				paid,
			} {
				if err := app(t).Guard().SetResult(ctx, "res", "alice", rec); err != nil {
					t.Fatal(err)
				}
				check("after "+rec.Code, rec)
			}
			// A second reservation (limit 2): the latest record, and the record of each.
			b2 := c.Post(path, alice, "")
			expect(t, "second buy", b2, http.StatusAccepted, "queued")
			queued := admission.Result{Code: "queued", ReservationID: b2.Str("reservation_id")}
			check("after a second win", admission.Result{Code: "queued", ReservationID: queued.ReservationID,
				Reservations: []admission.Result{paid, queued}})
		})
	}
}

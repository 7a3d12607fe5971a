package caddymodule_test

import (
	"net/http"
	"testing"
	"time"
)

// TestWaitingRoomReplayAfterSession: a winner whose waiting-room session has ended still gets
// the first answer of its win back by retrying the buy with the same Idempotency-Key (the answer
// it may never have received), also once the sale is sold out; nobody buys outside their
// session: a new key, no key, another user's key and a buyer who never won are refused as before.
func TestWaitingRoomReplayAfterSession(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret "+fuzzURLSecret+"\n"+
		roomBlock("rr", 5, now.Add(-time.Minute), now.Add(time.Hour), "session 2s")+
		roomBlock("last", 1, now.Add(-time.Minute), now.Add(time.Hour), "session 2s"), route)
	c := newClient(t, base)
	alice, bob, carol, dave, erin := token(t, "alice"), token(t, "bob"), token(t, "carol"), token(t, "dave"), token(t, "erin")

	// Everyone joins and is admitted within milliseconds (200/s); alice wins in rr, dave the only
	// item of last; bob and erin do not buy; carol never joins rr.
	for _, j := range []struct{ act, tok string }{{"rr", alice}, {"rr", bob}, {"last", dave}, {"last", erin}} {
		expect(t, "join "+j.act, c.Post("/seckill/"+j.act+"/queue", j.tok, ""), http.StatusOK, "ok")
		eventually(t, "admitted to "+j.act, func() (bool, string) {
			r := c.Get("/seckill/"+j.act+"/queue", j.tok)
			return r.Str("state") == "admitted", r.String()
		})
	}
	alicePath, davePath := buyPath(t, c, "rr", alice), buyPath(t, c, "last", dave)
	won := c.Post(alicePath, alice, "", "Idempotency-Key", "k-alice")
	expect(t, "alice buys in her session", won, http.StatusAccepted, "queued")
	sold := c.Post(davePath, dave, "", "Idempotency-Key", "k-dave")
	expect(t, "dave buys the last item in his session", sold, http.StatusAccepted, "queued")

	for _, s := range []struct{ act, tok string }{{"rr", alice}, {"rr", bob}, {"last", dave}, {"last", erin}} {
		eventually(t, "the session in "+s.act+" ends", func() (bool, string) {
			r := c.Get("/seckill/"+s.act+"/queue", s.tok)
			return r.Str("state") == "expired", r.String()
		})
	}

	// The winner's retry after the session: the first answer, reservation and remaining.
	again := c.Post(alicePath, alice, "", "Idempotency-Key", "k-alice")
	expect(t, "alice's retry after her session", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != won.Str("reservation_id") || again.Num("remaining") != won.Num("remaining") {
		t.Errorf("alice's retry after her session: %s; want the first answer %s", again, won)
	}
	// Nothing new outside a session.
	expect(t, "alice's new key after her session", c.Post(alicePath, alice, "", "Idempotency-Key", "k-alice-2"), http.StatusForbidden, "not_admitted")
	expect(t, "alice without a key after her session", c.Post(alicePath, alice, ""), http.StatusForbidden, "not_admitted")
	bobPath := signedBuyPath(t, fuzzURLSecret, "rr", "bob")
	expect(t, "bob, who did not buy, after his session", c.Post(bobPath, bob, "", "Idempotency-Key", "k-bob"), http.StatusForbidden, "not_admitted")
	expect(t, "bob with alice's key after his session", c.Post(bobPath, bob, "", "Idempotency-Key", "k-alice"), http.StatusForbidden, "not_admitted")
	carolPath := signedBuyPath(t, fuzzURLSecret, "rr", "carol")
	expect(t, "carol, never in the line, with alice's key", c.Post(carolPath, carol, "", "Idempotency-Key", "k-alice"), http.StatusForbidden, "not_admitted")
	expect(t, "alice's path after her session", c.Post("/seckill/rr/path", alice, ""), http.StatusForbidden, "not_admitted")
	if n := remaining(t, "rr"); n != 4 {
		t.Errorf("rr: remaining %d, want 4", n)
	}

	// Sold out and the session over: the winner's retry still gets its first answer.
	again = c.Post(davePath, dave, "", "Idempotency-Key", "k-dave")
	expect(t, "dave's retry after the sell-out and his session", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != sold.Str("reservation_id") || again.Num("remaining") != 0 {
		t.Errorf("dave's retry after the sell-out and his session: %s; want the first answer %s", again, sold)
	}
	eventually(t, "the held request ids of last loaded", func() (bool, string) { return app(t).Guard().HeldLoaded("last"), "" })
	erinPath := signedBuyPath(t, fuzzURLSecret, "last", "erin")
	expect(t, "erin's key after the sell-out", c.Post(erinPath, erin, "", "Idempotency-Key", "k-erin"), http.StatusGone, "sold_out")
	expect(t, "erin with dave's held key", c.Post(erinPath, erin, "", "Idempotency-Key", "k-dave"), http.StatusForbidden, "not_admitted")
	again = c.Post(davePath, dave, "", "Idempotency-Key", "k-dave")
	expect(t, "dave's retry once the held keys are loaded", again, http.StatusAccepted, "queued")
	if again.Str("reservation_id") != sold.Str("reservation_id") {
		t.Errorf("dave's retry once the held keys are loaded: %s; want the first answer %s", again, sold)
	}
	if n := remaining(t, "last"); n != 0 {
		t.Errorf("last: remaining %d, want 0", n)
	}
}

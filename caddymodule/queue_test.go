package caddymodule_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/hashedurl"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// roomBlock is the Caddyfile block of an activity with a waiting room.
func roomBlock(id string, stock int, start, end time.Time, room string) string {
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tstart %s\n\tend %s\n\twaiting_room {\n%s\n\t}\n}\n",
		id, stock, rfc3339(start), rfc3339(end), room)
}

// TestWaitingRoom walks the waiting room's contract on one gateway (store memory): joining,
// a second join keeping the first place, the buy step only for an admitted buyer during the
// session, closed once sold out, and the refusals that change nothing.
func TestWaitingRoom(t *testing.T) {
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\nurl_secret "+fuzzURLSecret+"\n"+
		roomBlock("wr", 1, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h")+
		roomBlock("brief", 5, now.Add(-time.Minute), now.Add(time.Hour), "session 1s")+
		roomBlock("early", 5, now.Add(time.Hour), now.Add(2*time.Hour), "opens 2h")+
		roomBlock("later", 5, now.Add(time.Hour), now.Add(2*time.Hour), "opens 15m")+
		roomBlock("over", 5, now.Add(-2*time.Hour), now.Add(-time.Hour), "")+
		activityBlock("plain", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route+"metrics /metrics\n")
	c := newClient(t, base)
	alice, bob, carol := token(t, "alice"), token(t, "bob"), token(t, "carol")

	// The status call says which activities have a waiting room: when its line opens, and the
	// session; an activity without one says nothing.
	r := c.Get("/seckill/later", "")
	expect(t, "status of later", r, http.StatusOK, "ok")
	room, _ := r.Body["waiting_room"].(map[string]any)
	if room == nil || int64(room["opens_ms"].(float64)) != int64(r.Num("start_ms"))-15*60*1000 ||
		room["session_ms"] != float64(2*60*1000) {
		t.Errorf("status of later: %s; want waiting_room {opens_ms: start - 15m, session_ms: 120000}", r)
	}
	if r := c.Get("/seckill/brief", ""); r.Body["waiting_room"].(map[string]any)["session_ms"] != float64(1000) {
		t.Errorf("status of brief: %s; want session_ms 1000", r)
	}
	if r := c.Get("/seckill/plain", ""); r.Body["waiting_room"] != nil {
		t.Errorf("status of plain, without a waiting room: %s", r)
	}

	// alice is the first in an empty line: admitted at once, for the session.
	r = c.Post("/seckill/wr/queue", alice, "")
	expect(t, "alice joins", r, http.StatusOK, "ok")
	if r.Str("state") != "admitted" || r.Num("position") != 1 || r.Num("admitted_until_ms") <= time.Now().UnixMilli() {
		t.Fatalf("alice, first in line: %s; want admitted at position 1 with a session", r)
	}
	// bob is next; with one admission an hour his turn is an hour away.
	r = c.Post("/seckill/wr/queue", bob, "")
	if r.Str("state") != "waiting" || r.Num("position") != 2 || r.Num("ahead") != 0 ||
		r.Num("eta_ms") < 59*60*1000 || r.Num("refresh_ms") < 1000 {
		t.Fatalf("bob behind alice: %s; want waiting at 2, an hour to go", r)
	}
	if _, ok := r.Body["admitted_until_ms"]; ok {
		t.Errorf("a waiting buyer is told admitted_until_ms: %s", r)
	}
	// A second join keeps the first place.
	r = c.Post("/seckill/wr/queue", bob, "")
	if r.Str("state") != "waiting" || r.Num("position") != 2 {
		t.Fatalf("bob joining again: %s; want his place 2 kept", r)
	}
	// The buy step: alice may, bob may not, carol (not in line) may not; nothing is sold to them.
	wrBefore := tallies(t, []string{"wr"})
	bobRefused := c.Post("/seckill/wr/path", bob, "")
	expect(t, "bob's path while waiting", bobRefused, http.StatusForbidden, "not_admitted")
	expect(t, "carol's path outside the line", c.Post("/seckill/wr/path", carol, ""), http.StatusForbidden, "not_admitted")
	expect(t, "carol's place", c.Get("/seckill/wr/queue", carol), http.StatusNotFound, "not_in_line")
	// The buy path is the user's own, the same at every call: one learned elsewhere (or kept from
	// an earlier turn) does not buy either.
	expect(t, "bob's buy while waiting", c.Post(signedBuyPath(t, fuzzURLSecret, "wr", "bob"), bob, ""), http.StatusForbidden, "not_admitted")
	expect(t, "carol's buy outside the line", c.Post(signedBuyPath(t, fuzzURLSecret, "wr", "carol"), carol, ""), http.StatusForbidden, "not_admitted")
	if n := remaining(t, "wr"); n != 1 {
		t.Fatalf("remaining %d after refusals, want 1", n)
	}
	if after := tallies(t, []string{"wr"}); fmt.Sprint(after) != fmt.Sprint(wrBefore) {
		t.Fatalf("the line after the refused paths: %v; before: %v", after, wrBefore)
	}
	alicePath := buyPath(t, c, "wr", alice)
	expect(t, "alice buys", c.Post(alicePath, alice, ""), http.StatusAccepted, "queued")

	// Sold out: bob, still waiting, is told closed, and a newcomer cannot join.
	eventually(t, "bob told closed", func() (bool, string) {
		r := c.Get("/seckill/wr/queue", bob)
		return r.Str("state") == "closed", r.String()
	})
	expect(t, "carol joins a sold-out sale", c.Post("/seckill/wr/queue", carol, ""), http.StatusGone, "sold_out")

	// A session ends: carol is admitted for a second, then her turn is over.
	r = c.Post("/seckill/brief/queue", carol, "")
	if r.Str("state") != "admitted" {
		t.Fatalf("carol in brief: %s; want admitted", r)
	}
	eventually(t, "carol's session ends", func() (bool, string) {
		r := c.Get("/seckill/brief/queue", carol)
		return r.Str("state") == "expired", r.String()
	})
	expect(t, "carol's path after her session", c.Post("/seckill/brief/path", carol, ""), http.StatusForbidden, "not_admitted")
	expect(t, "carol's buy after her session", c.Post(signedBuyPath(t, fuzzURLSecret, "brief", "carol"), carol, ""), http.StatusForbidden, "not_admitted")
	if n := remaining(t, "brief"); n != 5 {
		t.Fatalf("brief: remaining %d, want 5", n)
	}

	// Before the start: in the pre-queue, the place is drawn at the start.
	r = c.Post("/seckill/early/queue", alice, "")
	if r.Str("state") != "waiting" || r.Num("position") != 0 || r.Num("eta_ms") < 59*60*1000 {
		t.Fatalf("alice in the pre-queue: %s; want waiting, no position yet, about an hour", r)
	}
	expect(t, "path in the pre-queue", c.Post("/seckill/early/path", alice, ""), http.StatusForbidden, "not_started")

	t.Run("bad input", func(t *testing.T) {
		acts := []string{"wr", "brief", "early", "later", "over"}
		before := tallies(t, acts)
		for _, tc := range []struct {
			name, method, path, tok string
			status                  int
			code                    string
		}{
			{"unknown activity", http.MethodPost, "/seckill/nosuch/queue", alice, http.StatusNotFound, "not_found"},
			{"no waiting room", http.MethodPost, "/seckill/plain/queue", alice, http.StatusNotFound, "not_found"},
			{"before opens", http.MethodPost, "/seckill/later/queue", alice, http.StatusForbidden, "not_started"},
			{"after the end", http.MethodPost, "/seckill/over/queue", alice, http.StatusForbidden, "ended"},
			{"no token", http.MethodPost, "/seckill/brief/queue", "", http.StatusUnauthorized, "unauthorized"},
			{"bad token", http.MethodPost, "/seckill/brief/queue", "a.b.c", http.StatusUnauthorized, "unauthorized"},
			{"bad token poll", http.MethodGet, "/seckill/brief/queue", "a.b.c", http.StatusUnauthorized, "unauthorized"},
			{"wrong method", http.MethodPut, "/seckill/brief/queue", alice, http.StatusMethodNotAllowed, "method_not_allowed"},
			{"a segment more", http.MethodPost, "/seckill/brief/queue/x", alice, http.StatusNotFound, "not_found"},
			{"path in the pre-queue", http.MethodPost, "/seckill/early/path", alice, http.StatusForbidden, "not_started"},
			{"path outside the line", http.MethodPost, "/seckill/brief/path", bob, http.StatusForbidden, "not_admitted"},
			{"buy outside the line", http.MethodPost, signedBuyPath(t, fuzzURLSecret, "brief", "bob"), bob, http.StatusForbidden, "not_admitted"},
			{"buy in the pre-queue", http.MethodPost, signedBuyPath(t, fuzzURLSecret, "early", "alice"), alice, http.StatusForbidden, "not_started"},
			{"poll of an unknown activity", http.MethodGet, "/seckill/nosuch/queue", alice, http.StatusNotFound, "not_found"},
			{"challenge of a room without proof_of_work", http.MethodGet, "/seckill/brief/queue/challenge", alice, http.StatusNotFound, "not_found"},
		} {
			expect(t, tc.name, c.Do(tc.method, tc.path, tc.tok, nil), tc.status, tc.code)
		}
		// Every line is as it was: the store's own count.
		if after := tallies(t, acts); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("the lines after the bad requests: %v; before: %v", after, before)
		}
		// None of them took a place.
		expect(t, "alice's place in later", c.Get("/seckill/later/queue", alice), http.StatusNotFound, "not_in_line")
		expect(t, "alice's place in over", c.Get("/seckill/over/queue", alice), http.StatusNotFound, "not_in_line")
		r := c.Get("/seckill/brief/queue", bob)
		expect(t, "bob's place in brief", r, http.StatusNotFound, "not_in_line")
	})

	t.Run("metrics", func(t *testing.T) {
		out := string(c.Get("/metrics", "").Raw)
		for series, want := range map[string]float64{
			`caddy_seckill_waiting_room_length{activity="wr"}`:                              2,
			`caddy_seckill_waiting_room_admitted{activity="wr"}`:                            1,
			`caddy_seckill_waiting_room_length{activity="brief"}`:                           1,
			`caddy_seckill_waiting_room_sessions_ended{activity="brief"}`:                   1,
			`caddy_seckill_waiting_room_joins_total{activity="wr",result="joined"}`:         2,
			`caddy_seckill_waiting_room_joins_total{activity="wr",result="again"}`:          1,
			`caddy_seckill_waiting_room_joins_total{activity="wr",result="sold_out"}`:       1,
			`caddy_seckill_waiting_room_joins_total{activity="later",result="not_started"}`: 1,
		} {
			if got := metricValue(t, out, series); got != want {
				t.Errorf("%s = %v, want %v", series, got, want)
			}
		}
		// not_admitted and not_in_line are the waiting room layer's refusals.
		if got := metricValue(t, out, `caddy_seckill_rejected_total{layer="waiting_room"}`); got < 4 {
			t.Errorf(`rejected_total{layer="waiting_room"} = %v, want at least 4`, got)
		}
	})
}

// TestWaitingRoomTwoGateways joins the same users through two gateways on one Redis, many at
// once: one place each, positions 1..n with no gap or repeat, the same on both gateways, and the
// admissions, once everyone's turn has come, never more than admit per second plus one: each an
// interval after the last.
func TestWaitingRoomTwoGateways(t *testing.T) {
	bin := buildCaddy(t)
	rd := testsrv.StartRedis(t)
	now := time.Now()
	const perSecond, session = 20, 2 * time.Minute
	seckill := jwtBlock + "captcha off\nurl_secret shared-url-secret\nstore redis " + rd.Addr + "\n" +
		roomBlock("duo", 5, now.Add(-time.Minute), now.Add(time.Hour), fmt.Sprintf("admit %d/s", perSecond))
	bases := []string{startCaddy(t, seckill, route), startCaddyProcess(t, bin, seckill, route, "duo")}
	const users, workers = 60, 8
	tokens := make([]string, users)
	for i := range tokens {
		tokens[i] = token(t, fmt.Sprint("user", i))
	}
	var mu sync.Mutex
	positions := map[int]map[int64]bool{} // user -> positions answered
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newClient(t, bases[w%2])
			for i := range users {
				u := (i*7 + w*13) % users // every worker joins every user, each in its own order
				r := c.Post("/seckill/duo/queue", tokens[u], "")
				if r.Status != http.StatusOK {
					t.Errorf("user%d joins on %s: %s", u, bases[w%2], r)
					return
				}
				mu.Lock()
				if positions[u] == nil {
					positions[u] = map[int64]bool{}
				}
				positions[u][r.Num("position")] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	taken := map[int64]int{}
	for u := range users {
		if len(positions[u]) != 1 {
			t.Fatalf("user%d was answered positions %v; want one place", u, positions[u])
		}
		for p := range positions[u] {
			if other, dup := taken[p]; dup {
				t.Fatalf("position %d went to user%d and user%d", p, other, u)
			}
			taken[p] = u
		}
	}
	for p := int64(1); p <= users; p++ {
		if _, ok := taken[p]; !ok {
			t.Fatalf("position %d is skipped: %v", p, taken)
		}
	}
	// Everyone's turn comes within users/perSecond seconds; each gateway tells the same
	// admission time, in the order of the positions, an interval apart.
	clients := []*client{newClient(t, bases[0]), newClient(t, bases[1])}
	admittedAt := make([]int64, users+1) // by position
	for p := int64(1); p <= users; p++ {
		u := taken[p]
		var at [2]int64
		for g, c := range clients {
			eventually(t, fmt.Sprintf("user%d admitted on gateway %d", u, g), func() (bool, string) {
				r := c.Get("/seckill/duo/queue", tokens[u])
				at[g] = r.Num("admitted_until_ms") - session.Milliseconds()
				return r.Str("state") == "admitted" && r.Num("position") == p, r.String()
			})
		}
		if at[0] != at[1] {
			t.Fatalf("user%d (position %d) admitted at %d on one gateway, %d on the other", u, p, at[0], at[1])
		}
		admittedAt[p] = at[0]
	}
	interval := int64(1000 / perSecond)
	most := 0
	for p := int64(2); p <= users; p++ {
		// Times are whole milliseconds: an interval less one for the rounding.
		if gap := admittedAt[p] - admittedAt[p-1]; gap < interval-1 {
			t.Errorf("positions %d and %d admitted %d ms apart; want at least %d (admit %d/s)", p-1, p, gap, interval, perSecond)
		}
		n := 0
		for q := p; q <= users && admittedAt[q] < admittedAt[p]+1000; q++ {
			n++
		}
		most = max(most, n)
	}
	if most > perSecond+1 {
		t.Errorf("%d admissions within one second; want at most %d + 1", most, perSecond)
	}
	t.Logf("%d users, one place each; at most %d admitted in any second (admit %d/s)", users, most, perSecond)
}

// signedBuyPath is user's buy path in activity, as the path call hands it out under the
// Caddyfile's url_secret secret.
func signedBuyPath(t *testing.T, secret, activity, user string) string {
	t.Helper()
	s, ok := snapshot(t, activity)
	if !ok {
		t.Fatalf("activity %s is not in the store", activity)
	}
	return "/seckill/" + activity + "/buy/" + hashedurl.Sign([]byte(secret), activity, user, s.Salt)
}

// tallies reads the store's count of each activity's line (its length and early joiners).
func tallies(t *testing.T, acts []string) map[string][2]int64 {
	t.Helper()
	line, ok := app(t).Guard().Store().(waitroom.Line)
	if !ok {
		t.Fatal("the store keeps no line")
	}
	out := map[string][2]int64{}
	for _, a := range acts {
		tl, err := line.Tally(context.Background(), a)
		if err != nil {
			t.Fatal(err)
		}
		out[a] = [2]int64{tl.Length, tl.EarlyCount}
	}
	return out
}

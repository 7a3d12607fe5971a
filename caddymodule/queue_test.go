package caddymodule_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
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
	base := startCaddy(t, jwtBlock+"captcha off\n"+
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
	bobRefused := c.Post("/seckill/wr/path", bob, "")
	expect(t, "bob's path while waiting", bobRefused, http.StatusForbidden, "not_admitted")
	expect(t, "carol's path outside the line", c.Post("/seckill/wr/path", carol, ""), http.StatusForbidden, "not_admitted")
	expect(t, "carol's place", c.Get("/seckill/wr/queue", carol), http.StatusNotFound, "not_in_line")
	if n := remaining(t, "wr"); n != 1 {
		t.Fatalf("remaining %d after refusals, want 1", n)
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
		} {
			expect(t, tc.name, c.Do(tc.method, tc.path, tc.tok, nil), tc.status, tc.code)
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
// once: one place each, positions 1..n with no gap or repeat, the same on both gateways.
func TestWaitingRoomTwoGateways(t *testing.T) {
	bin := buildCaddy(t)
	rd := testsrv.StartRedis(t)
	now := time.Now()
	seckill := jwtBlock + "captcha off\nurl_secret shared-url-secret\nstore redis " + rd.Addr + "\n" +
		roomBlock("duo", 5, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h")
	bases := []string{startCaddy(t, seckill, route), startCaddyProcess(t, bin, seckill, route, "duo")}
	const users, workers = 60, 4
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
	// Both gateways read the same line.
	for _, b := range bases {
		c := newClient(t, b)
		r := c.Get("/seckill/duo/queue", tokens[0])
		if want := positionOf(taken, 0); r.Num("position") != want {
			t.Errorf("user0 on %s: %s; want position %d", b, r, want)
		}
	}
}

func positionOf(taken map[int64]int, user int) int64 {
	for p, u := range taken {
		if u == user {
			return p
		}
	}
	return 0
}

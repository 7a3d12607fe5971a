package caddymodule_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRoomReloadKeepsTurns reloads a running waiting room (store memory, and store redis on a
// private server) with another admit, then another session: no buyer's turn may move. Two early joiners (the lottery) and a late one are
// admitted at admit 10/s; a reload to 1/h would put the second early joiner an hour after the
// start, waiting again behind the late joiner already admitted, and a session cut to 1s would end
// every session at once. The line keeps the terms it was opened with, and such a reload is refused
// with the admin route. A room whose line is empty takes a new admit.
func TestRoomReloadKeepsTurns(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testRoomReloadKeepsTurns(t, "") })
	t.Run("redis", func(t *testing.T) {
		testRoomReloadKeepsTurns(t, "url_secret shared-url-secret\nstore redis "+testsrv.StartRedis(t).Addr+"\n")
	})
}

func testRoomReloadKeepsTurns(t *testing.T, store string) {
	port := freePort(t)
	t.Cleanup(func() { _ = caddy.Stop() })
	start := time.Now().Add(2 * time.Second).Truncate(time.Second)
	config := func(admit, session, soonAdmit string) string {
		return jwtBlock + "captcha off\n" + store +
			roomBlock("line", 5, start, start.Add(time.Hour), "admit "+admit+"\n\t\tsession "+session) +
			roomBlock("soon", 5, start.Add(time.Hour), start.Add(2*time.Hour), "admit "+soonAdmit)
	}
	if err := loadCaddy(t, port, config("10/s", "1h", "10/s"), route); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	users := []string{"alice", "bob", "carol"}
	tokens := map[string]string{}
	for _, u := range users {
		tokens[u] = token(t, u)
	}
	for _, u := range users[:2] {
		if r := c.Post("/seckill/line/queue", tokens[u], ""); r.Str("state") != "waiting" || r.Num("position") != 0 {
			t.Fatalf("%s joins before the start: %s; want waiting in the pre-queue", u, r)
		}
	}
	eventually(t, "the start", func() (bool, string) { return !time.Now().Before(start), "" })
	if r := c.Post("/seckill/line/queue", tokens["carol"], ""); r.Num("position") != 3 {
		t.Fatalf("carol joins after the start: %s; want position 3, behind the lottery", r)
	}
	// Everyone's turn comes within 300 ms of the start; the session lasts an hour.
	turns := map[string]string{} // user -> "position until"
	for _, u := range users {
		eventually(t, u+" admitted", func() (bool, string) {
			r := c.Get("/seckill/line/queue", tokens[u])
			turns[u] = fmt.Sprint(r.Num("position"), " ", r.Num("admitted_until_ms"))
			return r.Str("state") == "admitted", r.String()
		})
	}
	unmoved := func(what string) {
		t.Helper()
		for _, u := range users {
			r := c.Get("/seckill/line/queue", tokens[u])
			if got := fmt.Sprint(r.Num("position"), " ", r.Num("admitted_until_ms")); r.Str("state") != "admitted" || got != turns[u] {
				t.Errorf("%s: %s is %s; want admitted at position and until %s, as before", what, u, r, turns[u])
			}
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "activity line: waiting_room") ||
			!strings.Contains(err.Error(), "/seckill/activities/line") {
			t.Errorf("%s: %v; want it refused, naming activity line's waiting_room and the admin route", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}

	err := loadCaddy(t, port, config("1/h", "1h", "10/s"), route)
	c.AfterReload()
	unmoved("after a reload to admit 1/h")
	refused("a reload to admit 1/h", err)

	err = loadCaddy(t, port, config("10/s", "1s", "10/s"), route)
	c.AfterReload()
	unmoved("after a reload to session 1s")
	refused("a reload to session 1s", err)

	// Nobody is in soon's line: its admit may change.
	if err := loadCaddy(t, port, config("10/s", "1h", "20/s"), route); err != nil {
		t.Fatalf("a reload changing the admit of a room nobody joined: %v", err)
	}
	c.AfterReload()
	unmoved("after a reload changing another room")
}

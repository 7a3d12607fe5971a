package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddyfileparse "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

func init() { caddy.RegisterModule(noLineStore{}) }

// noLineStore is a test-only store module whose store keeps no waiting-room line (it is not a
// caddymodule.LineKeeper, and its store is no waitroom.Line), as a third party's store may be.
// Its name sorts after redis, so the list of stores the errors give still starts "local, memory,
// redis".
type noLineStore struct{}

func (noLineStore) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "seckill.stores.testnoline", New: func() caddy.Module { return new(noLineStore) }}
}

func (*noLineStore) PoolKey() string { return "testnoline" }

// OpenStore returns a Memory behind an admission.Store alone: its line methods are hidden.
func (*noLineStore) OpenStore() (admission.Store, error) {
	return struct{ admission.Store }{localstore.NewMemory(localstore.MemoryOptions{})}, nil
}

func (*noLineStore) UnmarshalCaddyfile(d *caddyfileparse.Dispenser) error {
	d.Next() // the store's name
	return nil
}

// TestWaitingRoomNeedsLine: a waiting room on a store that keeps no line is refused when the
// Caddyfile adapts, at the waiting_room line, and when a JSON configuration is loaded, before
// anything is opened; the same store without a waiting room is fine.
func TestWaitingRoomNeedsLine(t *testing.T) {
	now := time.Now()
	room := roomBlock("wr", 1, now.Add(-time.Minute), now.Add(time.Hour), "admit 5/s")
	text := caddyfile(t, freePort(t), "store testnoline\n"+jwtBlock+"captcha off\n"+room, route)
	line := 1 + strings.Count(text[:strings.Index(text, "waiting_room {")], "\n")
	want := "activity wr: waiting_room needs a store that keeps a line (store memory, local or redis); " +
		"store testnoline keeps none: remove waiting_room or change the store"
	_, err := adapt(t, text)
	if err == nil || !strings.Contains(err.Error(), want+fmt.Sprintf(", at Caddyfile:%d", line)) {
		t.Fatalf("adapt: %v; want %q at Caddyfile:%d", err, want, line)
	}

	// The same configuration in JSON (adapted with store memory, then the store swapped).
	cfg, err := adapt(t, strings.Replace(text, "store testnoline\n", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(cfg), &m); err != nil {
		t.Fatal(err)
	}
	m["apps"].(map[string]any)["seckill"].(map[string]any)["store"] = map[string]any{"type": "testnoline"}
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err == nil || !strings.Contains(err.Error(), want) {
		if err == nil {
			_ = caddy.Stop()
		}
		t.Fatalf("load JSON: %v; want %q", err, want)
	}

	// Without the waiting room, the store serves.
	plain := activityBlock("wr", 1, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)
	if _, err := adapt(t, caddyfile(t, freePort(t), "store testnoline\n"+jwtBlock+"captcha off\n"+plain, route)); err != nil {
		t.Fatalf("adapt without a waiting room: %v", err)
	}
}

// TestWaitingRoomStoreLocal: with store local, Caddy stopped and started again on the folder
// keeps every place and admission: the same positions and admission times, the admitted buyer
// still buys, the pre-queue is still there, a second join keeps the place and a newcomer lines
// up behind.
func TestWaitingRoomStoreLocal(t *testing.T) {
	now := time.Now()
	port := freePort(t)
	seckill := "store local " + t.TempDir() + "\nurl_secret 0123456789abcdef0123456789abcdef\n" + jwtBlock + "captcha off\n" +
		roomBlock("wr", 3, now.Add(-time.Minute), now.Add(time.Hour), "admit 1/h") +
		roomBlock("early", 3, now.Add(time.Hour), now.Add(2*time.Hour), "opens 2h")
	text := caddyfile(t, port, seckill, route+"metrics /metrics\n")
	if err := loadCaddyfile(t, text); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	c := newClient(t, base)
	users := []string{"alice", "bob", "carol"}
	before := map[string]response{}
	for _, u := range users {
		r := c.Post("/seckill/wr/queue", token(t, u), "")
		expect(t, u+" joins", r, http.StatusOK, "ok")
		before[u] = r
	}
	if before["alice"].Str("state") != "admitted" || before["carol"].Num("position") != 3 {
		t.Fatalf("before the restart: alice %s, carol %s", before["alice"], before["carol"])
	}
	dave := c.Post("/seckill/early/queue", token(t, "dave"), "")
	if dave.Str("state") != "waiting" || dave.Num("position") != 0 {
		t.Fatalf("dave in the pre-queue: %s", dave)
	}
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}

	runCaddyfile(t, text)
	c = newClient(t, base)
	for _, u := range users {
		r := c.Get("/seckill/wr/queue", token(t, u))
		b := before[u]
		if r.Str("state") != b.Str("state") || r.Num("position") != b.Num("position") ||
			r.Num("admitted_until_ms") != b.Num("admitted_until_ms") {
			t.Errorf("%s after the restart: %s; before: %s", u, r, b)
		}
		if again := c.Post("/seckill/wr/queue", token(t, u), ""); again.Num("position") != b.Num("position") {
			t.Errorf("%s joining again after the restart: %s; want position %d", u, again, b.Num("position"))
		}
	}
	if r := c.Get("/seckill/early/queue", token(t, "dave")); r.Str("state") != "waiting" || r.Num("position") != 0 {
		t.Errorf("dave after the restart: %s; want still in the pre-queue", r)
	}
	if r := c.Post("/seckill/wr/queue", token(t, "erin"), ""); r.Num("position") != 4 {
		t.Errorf("erin, new after the restart: %s; want position 4", r)
	}
	alice := token(t, "alice")
	expect(t, "alice buys after the restart", c.Post(buyPath(t, c, "wr", alice), alice, ""), http.StatusAccepted, "queued")
	expect(t, "bob's path, still waiting", c.Post("/seckill/wr/path", token(t, "bob"), ""), http.StatusForbidden, "not_admitted")
	out := string(c.Get("/metrics", "").Raw)
	if got := metricValue(t, out, `caddy_seckill_waiting_room_length{activity="wr"}`); got != 4 {
		t.Errorf("line length after the restart: %v, want 4", got)
	}
}

// TestWaitingRoomSentinelFailover: the line lives in the activity's hash tag, so a Sentinel
// failover moves it with the stock: after the master is SIGKILLed and its replica promoted,
// every place and every admission time is as it was, the line goes on admitting in order, a
// newcomer lines up behind, the pre-queue keeps its joiners, and the admitted buyers buying at
// once on the promoted master win exactly the stock (the waiting newcomer none). The replica has
// every join before the kill (WaitStreaming): a join is not covered by replicas_ack
// (docs/admission.md), and this test is about the line moving, not about the replication window.
func TestWaitingRoomSentinelFailover(t *testing.T) {
	sn := testsrv.StartSentinel(t, testsrv.WithDownAfter(time.Second))
	now := time.Now()
	const session = 2 * time.Minute
	seckill := jwtBlock + "captcha off\nurl_secret shared-url-secret\nstore redis {\n\taddress " +
		strings.Join(sn.Addrs(), " ") + "\n\tsentinel " + testsrv.SentinelMaster + "\n}\n" +
		roomBlock("fo", 5, now.Add(-time.Minute), now.Add(time.Hour), "admit 4/s") +
		roomBlock("pre", 5, now.Add(time.Hour), now.Add(2*time.Hour), "opens 2h")
	base := startCaddy(t, seckill, route+"metrics /metrics\n")
	c := newClient(t, base)
	const users = 16
	tokens := make([]string, users+1)
	for i := range tokens {
		tokens[i] = token(t, fmt.Sprint("user", i))
	}
	admittedAt := map[int64]int64{} // position → admission time, once told
	for i := range users {
		r := c.Post("/seckill/fo/queue", tokens[i], "")
		if r.Status != http.StatusOK || r.Num("position") != int64(i+1) {
			t.Fatalf("user%d joins: %s; want position %d", i, r, i+1)
		}
		if r.Str("state") == "admitted" {
			admittedAt[int64(i+1)] = r.Num("admitted_until_ms") - session.Milliseconds()
		}
		if i < 4 {
			expect(t, fmt.Sprint("user", i, " joins the pre-queue"), c.Post("/seckill/pre/queue", tokens[i], ""), http.StatusOK, "ok")
		}
	}
	before := tallies(t, []string{"fo", "pre"})

	old := sn.Master()
	for _, r := range sn.Servers {
		if r != old {
			if err := r.WaitStreaming(old, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	old.Kill()
	promoted, took := sn.WaitFailover(old, 30*time.Second)
	t.Logf("failover from %s to %s in %s", old.Addr, promoted.Addr, took)

	// Every place is where it was, and every admission told stays; the others come an interval
	// apart, in the order of the positions.
	times := make([]int64, users+1)
	for p := int64(1); p <= users; p++ {
		var r response
		eventually(t, fmt.Sprintf("position %d admitted after the failover", p), func() (bool, string) {
			r = c.Get("/seckill/fo/queue", tokens[p-1])
			return r.Status == http.StatusOK && r.Str("state") == "admitted", r.String()
		})
		if r.Num("position") != p {
			t.Fatalf("user%d after the failover: %s; want position %d", p-1, r, p)
		}
		times[p] = r.Num("admitted_until_ms") - session.Milliseconds()
		if at, ok := admittedAt[p]; ok && times[p] != at {
			t.Errorf("position %d admitted at %d after the failover, %d before", p, times[p], at)
		}
		if p > 1 && times[p]-times[p-1] < 250-1 {
			t.Errorf("positions %d and %d admitted %d ms apart; want 250 (admit 4/s)", p-1, p, times[p]-times[p-1])
		}
	}
	if after := tallies(t, []string{"fo", "pre"}); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the lines after the failover: %v; before: %v", after, before)
	}
	for i := range 4 {
		if r := c.Get("/seckill/pre/queue", tokens[i]); r.Str("state") != "waiting" || r.Num("position") != 0 {
			t.Errorf("user%d in the pre-queue after the failover: %s", i, r)
		}
	}
	r := c.Post("/seckill/fo/queue", tokens[users], "")
	if r.Num("position") != users+1 {
		t.Errorf("a newcomer after the failover: %s; want position %d", r, users+1)
	}

	// On the promoted master the line still gates the buy step and the stock holds: every
	// admitted buyer buys at once, the stock's count win, the others are told sold_out; the
	// newcomer, still waiting, is not let through.
	paths := make([]string, users+1)
	for i := range paths {
		paths[i] = signedBuyPath(t, "shared-url-secret", "fo", fmt.Sprint("user", i))
	}
	buy := func(i int) response { return c.Post(paths[i], tokens[i], "") }
	expect(t, "the newcomer's buy, waiting", buy(users), http.StatusForbidden, "not_admitted")
	codes := make([]string, users)
	var wg sync.WaitGroup
	for i := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = buy(i).Code()
		}()
	}
	wg.Wait()
	wins := 0
	for i, code := range codes {
		switch code {
		case "queued":
			wins++
		case "sold_out":
		default:
			t.Errorf("user%d's buy after the failover: %q; want queued or sold_out", i, code)
		}
	}
	if n := remaining(t, "fo"); wins != 5 || n != 0 {
		t.Errorf("after the failover %d buyers won 5 items, %d remain; want 5 wins and none left", wins, n)
	}
}

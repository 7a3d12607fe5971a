package caddymodule_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestLocalDiskFullReload is the README's answer to a full disk, end to end in Caddy: store local
// on a real 20 MB tmpfs (the ring takes 16 MiB) sells until the disk is full, then every buy is a
// 503 busy; with room again, a reload opens the folder again, and the sale goes on where the
// answers left it: remaining is the stock less every 202, each 202 replays with its reservation,
// and the commit counters of the metrics have not gone down.
func TestLocalDiskFullReload(t *testing.T) {
	mnt := testsrv.Tmpfs(t, "20m")
	dir := filepath.Join(mnt, "store")
	const stock = 1 << 30
	now := time.Now()
	port := freePort(t)
	config := "store local " + dir + "\nurl_secret local-reload-url-secret-0123456789abcdef\n" + jwtBlock + "captcha off\n" +
		activityBlock("full", stock, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)
	site := route + "metrics /metrics\n"
	t.Cleanup(func() { _ = caddy.Stop() }) // before the tmpfs is unmounted: Caddy holds the folder
	if err := loadCaddy(t, port, config, site); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	c.HTTP.Transport.(*http.Transport).DisableKeepAlives = true // a reload closes kept connections

	// Leave a little room, so that the sale fills it.
	filler := testsrv.Fill(t, mnt, 512<<10)
	type win struct{ user, key, path, reservation string }
	var wins []win
	refused := ""
	for i := 0; i < 20000 && refused == ""; i++ {
		user := fmt.Sprintf("u%d", i)
		tok := token(t, user)
		w := win{user: user, key: "k-" + user, path: buyPath(t, c, "full", tok)}
		r := c.Post(w.path, tok, "", "Idempotency-Key", w.key)
		switch {
		case r.Status == http.StatusAccepted:
			w.reservation = r.Str("reservation_id")
			wins = append(wins, w)
		case r.Status == http.StatusServiceUnavailable && r.Code() == "busy":
			refused = user
		default:
			t.Fatalf("buy %d: %s", i, r)
		}
	}
	if refused == "" || len(wins) == 0 {
		t.Fatalf("%d wins and no refusal: the disk never filled", len(wins))
	}
	t.Logf("%d wins before the disk was full", len(wins))
	// A failed store answers nothing more, wins or reads.
	tok := token(t, "late")
	if r := c.Post(buyPath(t, c, "full", tok), tok, "", "Idempotency-Key", "k-late"); r.Status != http.StatusServiceUnavailable {
		t.Errorf("buy after the failure: %s; want 503", r)
	}
	commitsFull := metricValue(t, string(c.Get("/metrics", "").Raw), "caddy_seckill_local_commits_total")

	// Room again, and a reload opens the folder again.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := loadCaddy(t, port, config, site); err != nil {
		t.Fatalf("reload: %v", err)
	}
	c.AfterReload()
	if n := remaining(t, "full"); n != stock-int64(len(wins)) {
		t.Errorf("remaining %d after the reload, want %d (the stock less the %d wins answered)", n, stock-int64(len(wins)), len(wins))
	}
	for _, w := range []win{wins[0], wins[len(wins)-1]} {
		r := c.Post(w.path, token(t, w.user), "", "Idempotency-Key", w.key)
		if r.Status != http.StatusAccepted || r.Str("reservation_id") != w.reservation {
			t.Errorf("retry of %s's win: %s; want 202 with reservation %s", w.user, r, w.reservation)
		}
	}
	// The refused buyer was told nothing but busy: a retry is a new admission, and wins.
	tok = token(t, refused)
	expect(t, "retry of the refused buy", c.Post(buyPath(t, c, "full", tok), tok, "", "Idempotency-Key", "k-"+refused), http.StatusAccepted, "queued")
	// The win was answered from the ring; its commit follows within milliseconds. The counter
	// carries on from the old store's count rather than starting again from 0.
	eventually(t, "commits_total past its count before the reload", func() (bool, string) {
		got := metricValue(t, string(c.Get("/metrics", "").Raw), "caddy_seckill_local_commits_total")
		return got >= commitsFull+1, fmt.Sprintf("commits_total %v after the reload and a win, %v before", got, commitsFull)
	})
}

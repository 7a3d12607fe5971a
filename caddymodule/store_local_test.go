package caddymodule_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// localSale is the seckill block of a store local sale of stock items in dir, with the embedded
// order backend on db; fsync, when set, goes in the store's block.
func localSale(dir, db, fsync string, stock int) string {
	store := "store local " + dir + "\n"
	if fsync != "" {
		store = "store local " + dir + " {\n\tfsync " + fsync + "\n}\n"
	}
	return store + "url_secret test-url-secret\n" + jwtBlock + "captcha off\n" + ordersOption("sqlite "+db) +
		saleBlock("local", stock)
}

// stopCaddy stops the Caddy of this process, as a shutdown between two runs does.
func stopCaddy(t *testing.T) {
	t.Helper()
	if err := caddy.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// TestStoreLocalRestart: a sale on store local continues across a stop and a start of Caddy on
// the same folder (remaining stock, the wins' orders, an Idempotency-Key's first answer); a
// reload keeps the one open store (no second open of the locked folder) and cannot change fsync;
// a folder another store holds is refused with a message that says so.
func TestStoreLocalRestart(t *testing.T) {
	tmp := t.TempDir()
	dir, db := filepath.Join(tmp, "data"), filepath.Join(tmp, "orders.db")
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cfg := localSale(dir, db, "", 3)
	if err := loadCaddy(t, port, cfg, ordersSite); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))

	alice := token(t, "alice")
	path := buyPath(t, c, "local", alice)
	first := c.Post(path, alice, "", "Idempotency-Key", "alice-1")
	expect(t, "alice buys", first, http.StatusAccepted, "queued")
	resv := first.Str("reservation_id")
	waitResult(t, c, "local", alice, "pending_payment")

	// A reload keeps the store open: same folder, no second open (which the lock would refuse).
	if err := loadCaddy(t, port, cfg+"rate_limit ip 1000/s\n", ordersSite); err != nil {
		t.Fatalf("reload with another rate limit: %v", err)
	}
	if n := remaining(t, "local"); n != 2 {
		t.Errorf("after the reload: remaining %d, want 2", n)
	}
	// fsync cannot change on a reload; the running configuration stays in force.
	err = loadCaddy(t, port, localSale(dir, db, "always", 3), ordersSite)
	if err == nil || !strings.Contains(err.Error(), "a reload cannot change it") {
		t.Errorf("reload with fsync always: %v; want a refusal", err)
	}
	if n := remaining(t, "local"); n != 2 {
		t.Errorf("after the refused reload: remaining %d, want 2", n)
	}
	// Another store on the same folder, in this process or another, is refused.
	if st, err := localstore.Open(dir, localstore.Options{}); !errors.Is(err, localstore.ErrLocked) {
		if st != nil {
			_ = st.Close()
		}
		t.Errorf("second open of a folder in use: %v; want localstore.ErrLocked", err)
	}

	// A restart on the same folder continues the sale.
	stopCaddy(t)
	if err := loadCaddy(t, port, cfg, ordersSite); err != nil {
		t.Fatalf("start again: %v", err)
	}
	if n := remaining(t, "local"); n != 2 {
		t.Errorf("after the restart: remaining %d, want 2", n)
	}
	again := c.Post(path, alice, "", "Idempotency-Key", "alice-1")
	expect(t, "alice's retry after the restart", again, http.StatusAccepted, "queued")
	if got := again.Str("reservation_id"); got != resv {
		t.Errorf("alice's retry after the restart: reservation %q, want the first answer's %q", got, resv)
	}
	expect(t, "alice buys again (new key)", c.Post(path, alice, "", "Idempotency-Key", "alice-2"),
		http.StatusConflict, "limit_reached")
	waitResult(t, c, "local", alice, "pending_payment")
	for _, u := range []string{"bob", "carol"} {
		tok := token(t, u)
		expect(t, u+" buys", c.Post(buyPath(t, c, "local", tok), tok, ""), http.StatusAccepted, "queued")
		waitResult(t, c, "local", tok, "pending_payment")
	}
	dave := token(t, "dave")
	r := c.Post("/seckill/local/path", dave, "")
	if r.Status == http.StatusOK {
		r = c.Post(r.Str("path"), dave, "")
	}
	expect(t, "dave after the sell-out", r, http.StatusGone, "sold_out")
	// A stopped Caddy leaves the folder free: `caddy seckill reconcile --config` opens it itself.
	stopCaddy(t)
	var bin, file string
	if !testing.Short() {
		bin, file = buildCaddy(t), filepath.Join(tmp, "Caddyfile")
		if err := os.WriteFile(file, []byte(caddyfile(t, port, cfg, ordersSite)), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out := runReconcile(t, bin, "--config", file); code != 0 || !strings.Contains(out, "activity local") {
			t.Errorf("reconcile on the stopped node's folder: exit %d:\n%s", code, out)
		}
	}
	// A folder held by another store is refused at start; reconcile then asks the admin API.
	held, err := localstore.Open(dir, localstore.Options{})
	if err != nil {
		t.Fatalf("open the folder once Caddy stopped: %v", err)
	}
	if n, err := held.Remaining(t.Context(), "local"); err != nil || n != 0 {
		t.Errorf("remaining read from the folder: %d, %v; want 0", n, err)
	}
	if bin != "" {
		if code, out := runReconcile(t, bin, "--config", file); code != 2 {
			t.Errorf("reconcile while another process holds the folder (admin off): exit %d, want 2 (it asks the admin API):\n%s", code, out)
		}
	}
	err = loadCaddy(t, port, cfg, ordersSite)
	_ = held.Close()
	if err == nil || !strings.Contains(err.Error(), "in use by another process") || !strings.Contains(err.Error(), "store local "+dir) {
		t.Errorf("start on a folder in use: %v; want a refusal naming store local %s", err, dir)
	}
}

// TestStoreForgottenSale: an embedded store that does not know a sale its order database holds
// orders of refuses to start — store memory after a restart (it forgot the sale), store local on
// a folder deleted since — and says what to do; a fresh order database starts.
func TestStoreForgottenSale(t *testing.T) {
	for _, typ := range []string{"memory", "local"} {
		t.Run(typ, func(t *testing.T) {
			tmp := t.TempDir()
			dir, db := filepath.Join(tmp, "data"), filepath.Join(tmp, "orders.db")
			port, err := testsrv.FreePort()
			if err != nil {
				t.Fatal(err)
			}
			cfg := localSale(dir, db, "", 2)
			if typ == "memory" {
				cfg = strings.Replace(cfg, "store local "+dir, "store memory", 1)
			}
			if err := loadCaddy(t, port, cfg, ordersSite); err != nil {
				t.Fatalf("load: %v", err)
			}
			t.Cleanup(func() { _ = caddy.Stop() })
			c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
			alice := token(t, "alice")
			expect(t, "alice buys", c.Post(buyPath(t, c, "local", alice), alice, ""), http.StatusAccepted, "queued")
			waitResult(t, c, "local", alice, "pending_payment")
			stopCaddy(t)

			want := "Use store local <folder>"
			if typ == "local" {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				want = "the store folder was deleted or replaced"
			}
			err = loadCaddy(t, port, cfg, ordersSite)
			if err == nil || !strings.Contains(err.Error(), "holds orders of a sale this store does not know") ||
				!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "activity local") {
				t.Fatalf("start over the earlier sale's orders: %v; want a refusal saying %q", err, want)
			}
			// A new order database is a new sale.
			if err := loadCaddy(t, port, strings.Replace(cfg, db, filepath.Join(tmp, "new.db"), 1), ordersSite); err != nil {
				t.Fatalf("start with a new order database: %v", err)
			}
			if n := remaining(t, "local"); n != 2 {
				t.Errorf("new sale: remaining %d, want 2", n)
			}
		})
	}
}

// TestStoreLocalDiskFull: a store local whose disk fills while the sale runs answers 503 busy
// (with Retry-After) instead of a win it could not commit, counts the refusals at the store_error
// and breaker layers, keeps answering the status call, and — reloaded once there is room again —
// opens its folder again, has lost none of the wins it answered, and sells on. It needs a small tmpfs, so it runs where the test may
// mount one (as root).
func TestStoreLocalDiskFull(t *testing.T) {
	mnt := testsrv.Tmpfs(t, "20m") // the ring takes 16 MiB
	dir := filepath.Join(mnt, "data")
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	const stock = 100_000
	cfg := "store local " + dir + "\nurl_secret test-url-secret\n" + jwtBlock + "captcha off\n" + saleBlock("full", stock)
	site := route + "metrics /metrics\n"
	if err := loadCaddy(t, port, cfg, site); err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	c := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))

	// Leave a little room, so that the sale fills it.
	filler := testsrv.Fill(t, mnt, 512<<10)
	wins, busy := 0, 0
	for i := 0; i < 20_000 && busy < 10; i++ {
		tok := token(t, fmt.Sprintf("u%d", i))
		r := c.Post(buyPath(t, c, "full", tok), tok, "")
		switch {
		case r.Status == http.StatusAccepted && r.Code() == "queued":
			if busy > 0 {
				t.Fatalf("buy %d won after the store failed: %s", i, r)
			}
			wins++
		case r.Status == http.StatusServiceUnavailable && r.Code() == "busy" && r.Header.Get("Retry-After") != "":
			busy++
		default:
			t.Fatalf("buy %d: %s; want 202 queued or 503 busy with Retry-After", i, r)
		}
	}
	if wins == 0 || busy == 0 {
		t.Fatalf("%d wins, %d busy: the disk did not fill during the sale", wins, busy)
	}
	expect(t, "status while the store is failed", c.Get("/seckill/full", ""), http.StatusOK, "ok")
	mt := string(c.Get("/metrics", "").Raw)
	storeErrors, breaker := metricValue(t, mt, `caddy_seckill_rejected_total{layer="store_error"}`), metricValue(t, mt, `caddy_seckill_rejected_total{layer="breaker"}`)
	if storeErrors < 1 || storeErrors+breaker != float64(busy) {
		t.Errorf("layers: store_error %v + breaker %v, want %d busy answers with at least one store error", storeErrors, breaker, busy)
	}

	// Room again, and a reload (`caddy reload --force`: the configuration is unchanged) opens the
	// folder again under the running handlers: every answered win is there, and the sale goes on
	// once the breaker lets a trial through.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := loadCaddy(t, port, cfg, site); err != nil {
		t.Fatalf("reload: %v", err)
	}
	c = newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port)) // the reload closed the old connections
	if n := remaining(t, "full"); n > stock-int64(wins) || n < stock-int64(wins)-int64(busy) {
		t.Errorf("remaining %d after the reload: want stock %d - %d answered wins (a 503 may have won too, at most %d)",
			n, stock, wins, busy)
	}
	tok := token(t, "after")
	path := buyPath(t, c, "full", tok)
	eventually(t, "a buy after the reload", func() (bool, string) {
		r := c.Post(path, tok, "", "Idempotency-Key", "after-1")
		return r.Status == http.StatusAccepted && r.Code() == "queued", r.String()
	})
	// And the folder holds it all after a stop and a start.
	stopCaddy(t)
	if err := loadCaddy(t, port, cfg, site); err != nil {
		t.Fatalf("start again: %v", err)
	}
	if n := remaining(t, "full"); n > stock-int64(wins)-1 || n < stock-int64(wins)-int64(busy)-1 {
		t.Errorf("remaining %d after the restart: want stock %d - %d answered wins - 1", n, stock, wins)
	}
	t.Logf("%d wins, then %d answers 503 busy (store_error %v, breaker %v)", wins, busy, storeErrors, breaker)
}

// TestStoreLocalProvisionErrors: configurations of store local that cannot work fail the load with
// the directive's name and the reason.
func TestStoreLocalProvisionErrors(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ cfg, want string }{
		{"store local " + file + "\nurl_secret s\n", "store local " + file + " is a file, not a folder"},
		{"store local {env.SECKILL_TEST_UNSET_FOLDER}\nurl_secret s\n", `store local "{env.SECKILL_TEST_UNSET_FOLDER}" is empty once placeholders are replaced`},
		{"store local " + filepath.Join(tmp, "d") + "\n", "store local needs a url_secret"},
	} {
		err := loadCaddy(t, port, c.cfg+jwtBlock+"captcha off\n", route)
		if err == nil {
			_ = caddy.Stop()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("load %q: %v; want an error containing %q", c.cfg, err, c.want)
		}
	}
}

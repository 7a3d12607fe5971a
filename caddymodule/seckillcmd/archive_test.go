package seckillcmd_test

import (
	"bytes"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
)

// runSeckill runs `caddy seckill args...` from the built binary and returns its exit status, its
// standard output (the command's report) and its standard error (Caddy's log and the error).
func runSeckill(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(bin, append([]string{"seckill"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("seckill %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// waitCode polls the buyer's result of activity until its code is want, and returns it.
func waitCode(t *testing.T, c *testcaddy.Client, activity, tok, want string) testcaddy.Response {
	t.Helper()
	var r testcaddy.Response
	testcaddy.Eventually(t, activity+" result "+want, func() (bool, string) {
		r = c.Get("/seckill/"+activity+"/result", tok)
		return r.Status == http.StatusOK && r.Code() == want, r.String()
	})
	return r
}

// TestArchiveCommandSQLite: `caddy seckill archive` on the single-node shape, store local and
// the embedded order backend on SQLite. While the gateway runs it holds the store's folder, so
// the command archives through its admin API: refused while an order is pending, then the sale
// is moved in batches while another sale's buyer waits to pay; the archived orders and results
// still read through the order API, reconcile holds, and the other sale goes on. With Caddy
// stopped the command opens the folder and the database itself: a second run is a no-op and
// reconcile still holds from the archive.
func TestArchiveCommandSQLite(t *testing.T) {
	bin := testcaddy.BuildCaddy(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "orders.db")
	s := testcaddy.StartSale(t, "store local "+filepath.Join(dir, "data")+"\nurl_secret test-url-secret\n"+
		testcaddy.JWTBlock+"captcha off\n"+testcaddy.OrdersOption("sqlite "+db)+
		testcaddy.SaleBlock("old", 3)+testcaddy.SaleBlock("new", 2))
	c := s.Client
	archive := func(args ...string) (int, string, string) {
		return runSeckill(t, bin, append([]string{"archive", "old", "--config", s.ConfigFile}, args...)...)
	}

	orders := map[string]string{}
	toks := map[string]string{}
	for _, u := range []string{"alice", "bob", "carol"} {
		toks[u] = testcaddy.Token(t, u)
		testcaddy.Expect(t, u+" buys", c.Post(testcaddy.BuyPath(t, c, "old", toks[u]), toks[u], ""), http.StatusAccepted, "queued")
		orders[u] = waitCode(t, c, "old", toks[u], "pending_payment").Str("order_id")
	}
	if code, out, errOut := archive(); code != 1 || out != "" || !strings.Contains(errOut, "the sale is not finished: 3 orders pending payment") {
		t.Fatalf("archive with pending orders: exit %d:\n%s%s", code, out, errOut)
	}
	testcaddy.Expect(t, "alice pays", c.Post("/orders/"+orders["alice"]+"/pay", toks["alice"], ""), http.StatusOK, "paid")
	testcaddy.Expect(t, "bob cancels", c.Post("/orders/"+orders["bob"]+"/cancel", toks["bob"], ""), http.StatusOK, "cancelled")
	testcaddy.Expect(t, "carol pays", c.Post("/orders/"+orders["carol"]+"/pay", toks["carol"], ""), http.StatusOK, "paid")
	testcaddy.Eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })

	// The other sale runs: dave's order is pending while the old sale is archived.
	dave := testcaddy.Token(t, "dave")
	testcaddy.Expect(t, "dave buys", c.Post(testcaddy.BuyPath(t, c, "new", dave), dave, ""), http.StatusAccepted, "queued")
	daveOrder := waitCode(t, c, "new", dave, "pending_payment").Str("order_id")

	code, out, errOut := archive("--batch", "2")
	if code != 0 || out != "old: orders hot 3 -> 0, archived 0 -> 3; moved 3 orders and 2 payment attempts in 2 batches\n" {
		t.Fatalf("archive through the running Caddy: exit %d:\n%s%s", code, out, errOut)
	}
	if code, out, errOut := archive(); code != 0 || out != "old: nothing to archive (3 orders archived, 0 in the hot table)\n" {
		t.Fatalf("second archive: exit %d:\n%s%s", code, out, errOut)
	}
	for u, want := range map[string]string{"alice": "paid", "bob": "cancelled", "carol": "paid"} {
		o := c.Get("/orders/"+orders[u], toks[u])
		testcaddy.Expect(t, u+"'s archived order", o, http.StatusOK, want)
		if o.Str("order_id") != orders[u] || o.Str("activity") != "old" {
			t.Errorf("%s's archived order: %s", u, o)
		}
		waitCode(t, c, "old", toks[u], want)
	}
	testcaddy.Expect(t, "bob reads alice's archived order", c.Get("/orders/"+orders["alice"], toks["bob"]), http.StatusNotFound, "not_found")
	testcaddy.Expect(t, "alice pays her archived order again", c.Post("/orders/"+orders["alice"]+"/pay", toks["alice"], ""),
		http.StatusOK, "paid")

	// The other sale goes on after the archive.
	testcaddy.Expect(t, "dave pays", c.Post("/orders/"+daveOrder+"/pay", dave, ""), http.StatusOK, "paid")
	erin := testcaddy.Token(t, "erin")
	testcaddy.Expect(t, "erin buys", c.Post(testcaddy.BuyPath(t, c, "new", erin), erin, ""), http.StatusAccepted, "queued")
	erinOrder := waitCode(t, c, "new", erin, "pending_payment").Str("order_id")
	testcaddy.Expect(t, "erin pays", c.Post("/orders/"+erinOrder+"/pay", erin, ""), http.StatusOK, "paid")
	testcaddy.Eventually(t, "reconcile after the archive", func() (bool, string) { return s.ReconcileOK(t) })
	if code, out, errOut := runSeckill(t, bin, "reconcile", "--config", s.ConfigFile); code != 0 ||
		!strings.Contains(out, "activity old") || !strings.Contains(out, "activity new") {
		t.Fatalf("reconcile through the running Caddy: exit %d:\n%s%s", code, out, errOut)
	}

	// Caddy stopped: the command opens the folder and the SQLite file itself.
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := archive(); code != 0 || out != "old: nothing to archive (3 orders archived, 0 in the hot table)\n" {
		t.Fatalf("archive with Caddy stopped: exit %d:\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runSeckill(t, bin, "reconcile", "--config", s.ConfigFile, "--activity", "old"); code != 0 ||
		!strings.Contains(out, "activity old") || strings.Contains(out, "VIOLATION") {
		t.Fatalf("reconcile of the archived sale with Caddy stopped: exit %d:\n%s%s", code, out, errOut)
	}
	if code, out, errOut := runSeckill(t, bin, "archive", "new", "--config", s.ConfigFile); code != 0 ||
		out != "new: orders hot 2 -> 0, archived 0 -> 2; moved 2 orders and 2 payment attempts in 1 batches\n" {
		t.Fatalf("archive of the other sale with Caddy stopped: exit %d:\n%s%s", code, out, errOut)
	}
}

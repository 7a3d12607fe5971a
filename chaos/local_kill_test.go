package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// localNode is one Caddy process running the whole sale on store local: the edge, the durable
// store in a folder and the embedded order backend on an SQLite file beside it. No redis-server,
// no PostgreSQL: the one-binary node of Caddyfile.example.
type localNode struct {
	*gateway
	e      *env
	folder string // the store's folder
	db     string // the order database
	admin  string // http://127.0.0.1:port of Caddy's admin endpoint
	hc     *http.Client

	cfg             string // the Caddyfile's path
	port, adminPort int
}

// startLocalNode writes the node's Caddyfile and runs Caddy until the activity's status answers.
func startLocalNode(t *testing.T, act activity) *localNode {
	t.Helper()
	if testing.Short() {
		t.Skip("the chaos suite builds and runs real servers")
	}
	bins.build(t)
	e := &env{t: t, mode: currentMode(), act: act, dir: t.TempDir()}
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	adminPort, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	n := &localNode{e: e, folder: filepath.Join(e.dir, "seckill-data"), admin: fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		hc: &http.Client{Timeout: 10 * time.Second}}
	n.db = filepath.Join(n.folder, "orders.db")
	dir := filepath.Join(e.dir, "node")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	n.cfg, n.port, n.adminPort = filepath.Join(dir, "Caddyfile"), port, adminPort
	n.configure(true)
	n.gateway = &gateway{base: fmt.Sprintf("http://127.0.0.1:%d", port), activity: act.id}
	n.server = e.newServer("node", bins.caddy, []string{"run", "--config", n.cfg, "--adapter", "caddyfile"}, nil)
	n.waitReady()
	return n
}

// configure writes the Caddyfile the next start runs: Caddyfile.example's deployment, with the
// store's fsync policy always or no.
func (n *localNode) configure(fsyncAlways bool) {
	n.e.t.Helper()
	if err := os.WriteFile(n.cfg, []byte(n.caddyfile(fsyncAlways)), 0o600); err != nil {
		n.e.t.Fatal(err)
	}
}

// caddyfile is Caddyfile.example's deployment for a program: store local, the embedded order
// backend, captcha off, no rate limits, the admin endpoint (for reconcile and live counters).
func (n *localNode) caddyfile(fsyncAlways bool) string {
	a := n.e.act
	fsync := "no"
	if fsyncAlways {
		fsync = "always"
	}
	return fmt.Sprintf(`{
	admin 127.0.0.1:%d
	persist_config off
	seckill {
		store local %s {
			fsync %s
		}
		jwt {
			algorithms HS256
			hmac_secret %s
		}
		url_secret %s
		captcha off
		orders sqlite %s {
			consumer_name chaos-local
		}
		activity %s {
			stock %d
			limit %d
			start %s
			end %s
			pay_within 15m
		}
	}
}

http://:%d {
	bind 127.0.0.1
	route /seckill/* {
		seckill
	}
}
`, n.adminPort, n.folder, fsync, jwtSecret, urlSecret, n.db, a.id, a.stock, a.limit,
		a.start.UTC().Format(time.RFC3339), a.end.UTC().Format(time.RFC3339), n.port)
}

// counters are an activity's live counters, as the admin API shows them.
type counters struct {
	Remaining int64 `json:"remaining"`
	Sold      int64 `json:"sold"`
	Wins      int64 `json:"wins"`
}

// snapshot reads the activity's live counters through the admin API.
func (n *localNode) snapshot() (counters, error) {
	var s counters
	res, err := n.hc.Get(n.admin + "/seckill/activities/" + n.e.act.id)
	if err != nil {
		return s, err
	}
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return s, err
	}
	if res.StatusCode != http.StatusOK {
		return s, fmt.Errorf("admin activity: %d %s", res.StatusCode, b)
	}
	return s, json.Unmarshal(b, &s)
}

// reconciled asks the node to reconcile its sale (admin API) and reports whether it passes.
func (n *localNode) reconciled() (bool, string) {
	res, err := n.hc.Get(n.admin + "/seckill/reconcile?activity=" + n.e.act.id)
	if err != nil {
		return false, err.Error()
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	var ans struct {
		OK bool `json:"ok"`
	}
	return res.StatusCode == http.StatusOK && json.Unmarshal(b, &ans) == nil && ans.OK, string(b)
}

// result reads a buyer's result record: its code and reservation ("none" without a record).
func (n *localNode) result(b buyer) (code, reservation string, err error) {
	req, err := http.NewRequest(http.MethodGet, n.base+"/seckill/"+n.e.act.id+"/result", nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	res, err := n.hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = res.Body.Close() }()
	var r struct {
		Code        string `json:"code"`
		Reservation string `json:"reservation_id"`
	}
	if res.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("result of %s: %d", b.user, res.StatusCode)
	}
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		return "", "", fmt.Errorf("result of %s: %w", b.user, err)
	}
	return r.Code, r.Reservation, nil
}

// TestLocalStoreKilled is scenario 10: one Caddy process is the whole sale (store local, the
// embedded order backend on SQLite); it is killed with SIGKILL at random moments while a flood of
// buyers buys, and started again on the same folder each time, until the sale sells out. After
// each restart, before any new call, the stock left is exactly the stock minus the wins made
// before the kill: every 202 answered before it, plus the wins of calls in flight at the kill that
// the store had committed (their buyers' result records show them; their retries must get those
// same reservations back). At the end: sold out, every 202 exactly one order of its buyer, nobody
// above the limit, no key admitted twice, reconcile passes — in the running node and again on the
// folder and database opened by the test after a clean stop.
func TestLocalStoreKilled(t *testing.T) {
	m := currentMode()
	rounds := 4
	if m.full {
		rounds = 10
	}
	act := newActivity("local-kill", m.stock, 2)
	n := startLocalNode(t, act)
	buyers := makeBuyers(t, "lk", m.users, 1)
	byUser := map[string]buyer{}
	for _, b := range buyers {
		byUser[b.user] = b
	}

	d := newDriver(t, act.id, n.gateway)
	d.noAnswerOK = true // the killed node's calls lose their answers: that is the point
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wait := d.start(ctx, buyers, m.conc)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	inFlightWins := map[string]string{} // user → reservation committed by a call whose answer died
	flood := 0                          // buys in flight at the kills
	resumed := time.Now()               // the buyers went on after the last restart
	for round := 1; round <= rounds; round++ {
		// A random moment of the flood: after a random number of further wins, at most an even
		// share of the stock left, and a random few milliseconds more. The buyers are not held:
		// calls are on their way through the node when it dies.
		base := d.won.Load()
		if base >= act.stock { // a loaded machine let the flood run past an earlier round's target
			t.Logf("round %d: the sale sold out before it; %d kills", round, round-1)
			break
		}
		share := max((act.stock-base)/int64(rounds-round+2), 1)
		target := base + 1 + rng.Int64N(share)
		for deadline := time.Now().Add(time.Minute); d.won.Load() < target; time.Sleep(200 * time.Microsecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the buyers did not reach %d wins within a minute (%d)", round, target, d.won.Load())
			}
			n.failIfExited()
		}
		time.Sleep(time.Duration(rng.IntN(2_000)) * time.Microsecond)
		n.kill()
		killed := time.Now()
		d.gate.hold() // calls that lost their answer wait at the gate for the restart
		d.gate.quiet()

		answered := map[string]string{} // user → reservation, from 202s before the kill
		inFlight := map[string]bool{}   // users whose buy was sent in this round and lost its answer
		for _, a := range d.snapshot() {
			switch {
			case a.call == "buy" && a.status == http.StatusAccepted:
				answered[a.user] = a.reservation
			case a.call == "buy" && a.status == 0 && a.sent.After(resumed) && a.sent.Before(killed):
				inFlight[a.user] = true
			}
		}
		// Starts alternate in pairs between fsync always and the ring, from always on the new
		// folder: every change of policy across a kill, and a folder that never had a ring.
		always := (round/2)%2 == 0
		n.configure(always)
		began := time.Now()
		var err error
		n.restart()
		restarted := time.Since(began)
		// The site answers a moment before Caddy's admin endpoint sees the new configuration.
		var snap counters
		waitFor(t, fmt.Sprintf("round %d: the live counters after the restart", round), 30*time.Second, func() bool {
			snap, err = n.snapshot()
			return err == nil
		})
		// The wins of calls in flight: the store committed them or not; the buyer's record says.
		committed := 0
		for u := range inFlight {
			if _, ok := answered[u]; ok {
				continue
			}
			code, resv, err := n.result(byUser[u])
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if code != "none" {
				committed++
				inFlightWins[u] = resv
			}
		}
		want := act.stock - int64(len(answered)) - int64(committed)
		if snap.Remaining != want {
			t.Errorf("round %d: remaining %d after the restart, want %d = stock %d - %d answered 202s - %d wins of calls in flight",
				round, snap.Remaining, want, act.stock, len(answered), committed)
		}
		if held := snap.Sold; held != int64(len(answered)+committed) {
			t.Errorf("round %d: the store holds %d sold items, want %d", round, held, len(answered)+committed)
		}
		flood += len(inFlight)
		t.Logf("round %d: killed at %d answered wins (target %d), %d buys in flight (%d of them committed wins); "+
			"restarted (fsync always: %v) in %s; remaining %d, wins %d",
			round, len(answered), target, len(inFlight), committed, always, restarted.Round(time.Millisecond), snap.Remaining, snap.Wins)
		resumed = time.Now()
		d.gate.release()
	}
	wait()
	if flood == 0 {
		t.Errorf("no buy was in flight at any of the %d kills: the kills missed the flood", rounds)
	}
	t.Logf("answers: %s", summary(d.snapshot()))
	d.checkAnswers()

	// A win whose answer died with the node is answered again, with the same reservation, to the
	// buyer's retry with the same key.
	wins := d.wins()
	for u, resv := range inFlightWins {
		if got := wins[userKey{u, byUser[u].key}]; got != resv {
			t.Errorf("%s's win %s, committed before a kill, was answered %q to the retry", u, resv, got)
		}
	}
	snap, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if snap.Remaining != 0 || int64(len(wins)) != act.stock {
		t.Errorf("not sold out: remaining %d, %d buy intents won, stock %d", snap.Remaining, len(wins), act.stock)
	}

	// The node's own reconcile, once its consumer has turned the queue into orders.
	began := time.Now()
	var last string
	waitFor(t, "reconcile on the node", n.e.mode.drain, func() bool {
		var ok bool
		ok, last = n.reconciled()
		return ok
	})
	drained := time.Since(began)

	// Then a clean stop, and the folder and the database read by the test itself.
	n.stop()
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	store, err := localstore.Open(n.folder, localstore.Options{})
	if err != nil {
		t.Fatalf("open the folder after the stop: %v", err)
	}
	defer func() { _ = store.Close() }()
	repo, err := orderbackend.OpenRepository(rctx, "sqlite", n.db)
	if err != nil {
		t.Fatalf("open the order database: %v", err)
	}
	defer func() { _ = repo.Close() }()
	rep, err := orderbackend.Reconcile(rctx, store, repo, act.id)
	if err != nil || !rep.OK() {
		t.Fatalf("reconcile on the stopped node's files: %v\n%s\n(the node said: %s)", err, rep, last)
	}
	if rep.DeadLetters != 0 {
		t.Errorf("%d wins were dead-lettered: their buyers got a 202 and no order", rep.DeadLetters)
	}
	orders, err := repo.Orders(rctx, act.id)
	if err != nil {
		t.Fatal(err)
	}
	told := checkOrders(t, act, d, orders, nil) // a local store loses no answered win
	t.Logf("reconcile OK %s after the sale: wins %d, orders %d, store remaining %d, database left %d, buyers told %d",
		drained.Round(time.Millisecond), rep.Wins, rep.Orders, rep.StoreRemaining, rep.DBLeft, told)
}

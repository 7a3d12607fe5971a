package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// buyer is one simulated user with one buy intent: one token, one Idempotency-Key that every retry
// of the buy reuses, and the gateway it starts on.
type buyer struct {
	user, key, token string
	gateway          int
}

// makeBuyers mints n buyers named prefix-NNNN, spread over the gateways round-robin.
func makeBuyers(t *testing.T, prefix string, n, gateways int) []buyer {
	t.Helper()
	bs := make([]buyer, n)
	for i := range bs {
		user := fmt.Sprintf("%s-%04d", prefix, i)
		tok, err := jwtauth.Mint(jwtauth.MintConfig{Secret: []byte(jwtSecret), Subject: user, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var r [6]byte
		_, _ = rand.Read(r[:])
		bs[i] = buyer{user: user, key: "key-" + user + "-" + hex.EncodeToString(r[:]), token: tok, gateway: i % gateways}
	}
	return bs
}

// attempt is one HTTP call of a buyer.
type attempt struct {
	user, key   string
	call        string // "path" or "buy"
	gateway     int
	sent, got   time.Time
	status      int    // 0: no answer (connection refused or reset, timeout)
	err         string // why there was no answer
	code        string
	retryAfter  string
	reservation string
	path        string
}

func (a attempt) String() string {
	if a.status == 0 {
		return fmt.Sprintf("%s %s on gateway %d: no answer (%s)", a.user, a.call, a.gateway, a.err)
	}
	return fmt.Sprintf("%s %s on gateway %d: %d %s", a.user, a.call, a.gateway, a.status, a.code)
}

// userKey is one buy intent.
type userKey struct{ user, key string }

// driver is the load: buyers ask for their buy path, then buy with their Idempotency-Key, and
// retry — with the same key, on the next gateway — after no answer, 503 or 429, honouring
// Retry-After up to retryCap. Every call is recorded.
type driver struct {
	t        *testing.T
	act      string
	bases    []string // gateways' base URLs
	hc       *http.Client
	body     string        // buy body; "" buys one item
	retryCap time.Duration // longest wait taken from a Retry-After
	// noAnswerOK allows calls without an answer (a scenario that kills a gateway); elsewhere one
	// is a failure: the gateways must always answer, if only 503.
	noAnswerOK bool

	gate     gate
	expected atomic.Int64  // buyers handed to start
	won      atomic.Int64  // 202 answers (replays included)
	holdWon  atomic.Int64  // holdAt's count; 0: none
	held     chan struct{} // closed when the gate was held at holdWon

	mu       sync.Mutex
	attempts []attempt
	final    map[string]attempt // user → the definite answer that ended its intent
}

const noAnswerWait = 50 * time.Millisecond

// gatewayClient is the gateways' base URLs and a client keeping up to conns idle connections to
// them (closed when t ends), each call bounded by timeout.
func gatewayClient(t *testing.T, conns int, timeout time.Duration, gws []*gateway) ([]string, *http.Client) {
	bases := make([]string, len(gws))
	for i, g := range gws {
		bases[i] = g.base
	}
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return bases, &http.Client{Transport: tr, Timeout: timeout}
}

func newDriver(t *testing.T, act string, gws ...*gateway) *driver {
	bases, hc := gatewayClient(t, 1024, 10*time.Second, gws)
	d := &driver{t: t, act: act, bases: bases, hc: hc, retryCap: time.Second, final: map[string]attempt{}}
	d.gate.cond = sync.NewCond(&d.gate.mu)
	return d
}

// start runs buyers, conc at a time, until each has a definite answer or ctx ends; wait blocks
// until then.
func (d *driver) start(ctx context.Context, buyers []buyer, conc int) (wait func()) {
	d.expected.Add(int64(len(buyers)))
	ch := make(chan buyer)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range ch {
				d.buy(ctx, b)
			}
		}()
	}
	go func() {
		defer close(ch)
		for _, b := range buyers {
			select {
			case ch <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return func() { <-done }
}

// buy is one buyer's whole intent: the path, then the buy, each retried until definite.
func (d *driver) buy(ctx context.Context, b buyer) {
	gw := b.gateway
	path := ""
	for path == "" {
		a := d.call(ctx, "path", b, gw, "/seckill/"+d.act+"/path", "{}")
		switch {
		case ctx.Err() != nil:
			return
		case a.status == http.StatusOK && a.path != "":
			path = a.path
		case d.retry(ctx, a):
			gw = (gw + 1) % len(d.bases)
		default:
			d.finish(a) // e.g. 410 sold_out from the node's flag
			return
		}
	}
	d.buyPath(ctx, b, gw, path)
}

// buyPath buys on path, starting on gateway gw, until a definite answer, and returns it.
func (d *driver) buyPath(ctx context.Context, b buyer, gw int, path string) attempt {
	for {
		a := d.call(ctx, "buy", b, gw, path, d.body)
		switch {
		case ctx.Err() != nil:
			return a
		case d.retry(ctx, a):
			gw = (gw + 1) % len(d.bases)
		default:
			d.finish(a)
			return a
		}
	}
}

// retry waits before the next try of a call that got no definite answer, and reports whether
// there is to be one.
func (d *driver) retry(ctx context.Context, a attempt) bool {
	var wait time.Duration
	switch a.status {
	case 0:
		wait = noAnswerWait
	case http.StatusServiceUnavailable, http.StatusTooManyRequests:
		secs, err := strconv.Atoi(a.retryAfter)
		if err != nil || secs < 0 {
			secs = 1 // checkAnswers reports the missing header
		}
		wait = min(time.Duration(secs)*time.Second, d.retryCap)
	default:
		return false
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// call makes one HTTP call and records it.
func (d *driver) call(ctx context.Context, call string, b buyer, gw int, path, body string) attempt {
	d.gate.enter()
	defer d.gate.leave()
	a := attempt{user: b.user, key: b.key, call: call, gateway: gw, sent: time.Now()}
	defer func() { d.record(a) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.bases[gw]+path, strings.NewReader(body))
	if err != nil {
		a.err = err.Error()
		return a
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	if call == "buy" {
		req.Header.Set("Idempotency-Key", b.key)
	}
	res, err := d.hc.Do(req)
	if err != nil {
		a.got, a.err = time.Now(), err.Error()
		return a
	}
	raw, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	a.got = time.Now()
	if err != nil {
		a.err = "reading the answer: " + err.Error()
		return a
	}
	var ans struct {
		Code        string `json:"code"`
		Path        string `json:"path"`
		Reservation string `json:"reservation_id"`
	}
	_ = json.Unmarshal(raw, &ans) // a body that is not JSON leaves code empty: checkAnswers reports it
	a.status, a.code, a.path, a.reservation = res.StatusCode, ans.Code, ans.Path, ans.Reservation
	a.retryAfter = res.Header.Get("Retry-After")
	if call == "buy" && a.status == http.StatusAccepted {
		d.maybeHold(d.won.Add(1))
	}
	return a
}

// holdAt makes the driver hold its gate (no new calls; those in flight go on) when the buyers
// have received n 202 answers, and returns a channel closed then. A fault injected once it is
// closed finds the sale at a known point: at most n plus the calls in flight have won. The caller
// releases the gate.
func (d *driver) holdAt(n int64) <-chan struct{} {
	ch := make(chan struct{})
	d.held = ch
	d.holdWon.Store(n)
	d.maybeHold(d.won.Load()) // the buyers may be there already
	return ch
}

// burst lets n more calls through the held gate and returns once half of them have started (or
// after a second), so that a fault injected right after meets calls on their way through the
// gateways while the sale stays at a known point: at most holdAt's count, plus the calls in
// flight when it held, plus n have won. The caller releases the gate.
func (d *driver) burst(n int) {
	d.gate.let(n)
	for deadline := time.Now().Add(time.Second); d.gate.letting() > n/2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Microsecond)
	}
}

// maybeHold holds the gate once the wins reach holdAt's count; exactly one caller does.
func (d *driver) maybeHold(won int64) {
	if h := d.holdWon.Load(); h > 0 && won >= h && d.holdWon.CompareAndSwap(h, 0) {
		d.gate.hold()
		close(d.held)
	}
}

func (d *driver) record(a attempt) {
	d.mu.Lock()
	d.attempts = append(d.attempts, a)
	d.mu.Unlock()
}

func (d *driver) finish(a attempt) {
	d.mu.Lock()
	d.final[a.user] = a
	d.mu.Unlock()
}

// waitHeld waits until the gate closed by holdAt(n) is held.
func (d *driver) waitHeld(t *testing.T, held <-chan struct{}, n int64) {
	t.Helper()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatalf("the buyers did not reach %d wins within a minute (%d)", n, d.won.Load())
	}
}

// snapshot returns every call recorded so far.
func (d *driver) snapshot() []attempt {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]attempt(nil), d.attempts...)
}

// within returns the calls sent at or after from and answered (or given up) before to.
func (d *driver) within(from, to time.Time) []attempt {
	var out []attempt
	for _, a := range d.snapshot() {
		if !a.sent.Before(from) && a.got.Before(to) {
			out = append(out, a)
		}
	}
	return out
}

// wins maps every buy intent that got a 202 to its reservation.
func (d *driver) wins() map[userKey]string {
	m := map[userKey]string{}
	for _, a := range d.snapshot() {
		if a.call == "buy" && a.status == http.StatusAccepted {
			if _, ok := m[userKey{a.user, a.key}]; !ok {
				m[userKey{a.user, a.key}] = a.reservation
			}
		}
	}
	return m
}

// keysPerUser counts the Idempotency-Keys each user bought with.
func (d *driver) keysPerUser() map[string]int {
	seen := map[userKey]bool{}
	n := map[string]int{}
	for _, a := range d.snapshot() {
		if a.call == "buy" && !seen[userKey{a.user, a.key}] {
			seen[userKey{a.user, a.key}] = true
			n[a.user]++
		}
	}
	return n
}

func (d *driver) allFinished() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return int64(len(d.final)) == d.expected.Load()
}

// checkAnswers holds the buyers' side of the contract: every buyer got a definite answer; every
// answer is one the contract lists for the call; 503 is always `busy` and 503 and 429 carry
// Retry-After; and the 202 answers of one intent all carry the same reservation.
func (d *driver) checkAnswers() {
	t := d.t
	t.Helper()
	d.mu.Lock()
	finished, expected := len(d.final), d.expected.Load()
	d.mu.Unlock()
	if int64(finished) != expected {
		t.Errorf("%d of %d buyers never got a definite answer", expected-int64(finished), expected)
	}
	allowed := map[string]map[int]string{
		"path": {200: "ok", 410: "sold_out", 429: "rate_limited", 503: "busy"},
		"buy":  {202: "queued", 409: "limit_reached", 410: "sold_out", 429: "rate_limited", 503: "busy"},
	}
	resv := map[userKey]string{}
	bad := 0
	for _, a := range d.snapshot() {
		if a.status == 0 {
			if !d.noAnswerOK && bad < 10 {
				t.Errorf("a gateway did not answer: %s", a)
				bad++
			}
			continue
		}
		if code, ok := allowed[a.call][a.status]; !ok || code != a.code {
			if bad < 10 {
				t.Errorf("unexpected answer: %s", a)
				bad++
			}
		}
		if (a.status == 503 || a.status == 429) && a.retryAfter == "" && bad < 10 {
			t.Errorf("%s without Retry-After", a)
			bad++
		}
		if a.call == "buy" && a.status == http.StatusAccepted {
			k := userKey{a.user, a.key}
			if r, ok := resv[k]; ok && r != a.reservation {
				t.Errorf("double admission: key %s of %s answered reservations %s and %s", a.key, a.user, r, a.reservation)
			}
			resv[k] = a.reservation
		}
	}
}

// summary counts calls by call, status and code, e.g. "buy 202 queued 100, buy 503 busy 12".
func summary(as []attempt) string {
	n := map[string]int{}
	for _, a := range as {
		k := fmt.Sprintf("%s %d %s", a.call, a.status, a.code)
		if a.status == 0 {
			k = a.call + " no-answer"
		}
		n[k]++
	}
	return joinCounts(n)
}

// joinCounts lists counts in key order, e.g. "a: 1, b: 2".
func joinCounts(n map[string]int) string {
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, n[k])
	}
	return strings.Join(parts, ", ")
}

// count returns how many calls match.
func count(as []attempt, match func(attempt) bool) int {
	n := 0
	for _, a := range as {
		if match(a) {
			n++
		}
	}
	return n
}

// gate lets the test stop the buyers from starting new calls (hold), let a few through (let),
// wait until the calls in flight are answered (quiet) and let them all go on (release). cond is
// set by newDriver.
type gate struct {
	mu       sync.Mutex
	cond     *sync.Cond
	held     bool
	allow    int // calls still to let through while held
	inFlight int
}

func (g *gate) enter() {
	g.mu.Lock()
	for g.held && g.allow == 0 {
		g.cond.Wait()
	}
	if g.held {
		g.allow--
	}
	g.inFlight++
	g.mu.Unlock()
}

func (g *gate) leave() {
	g.mu.Lock()
	g.inFlight--
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) hold() {
	g.mu.Lock()
	g.held, g.allow = true, 0
	g.mu.Unlock()
}

// let lets n more calls through while the gate is held.
func (g *gate) let(n int) {
	g.mu.Lock()
	g.allow += n
	g.cond.Broadcast()
	g.mu.Unlock()
}

// letting is how many calls let has still to let through.
func (g *gate) letting() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allow
}

func (g *gate) quiet() {
	g.mu.Lock()
	for g.inFlight > 0 {
		g.cond.Wait()
	}
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	g.held, g.allow = false, 0
	g.cond.Broadcast()
	g.mu.Unlock()
}

package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Each buyer of scenario 16 has a minute to buy once admitted.
const lineSession = time.Minute

// writeLineConfig writes the node's Caddyfile with a waiting room admitting admit buyers a second
// in front of the activity.
func writeLineConfig(n *localNode, fsyncAlways bool, admit int) {
	n.e.t.Helper()
	room := fmt.Sprintf("pay_within 15m\n\t\t\twaiting_room {\n\t\t\t\topens 1h\n\t\t\t\tadmit %d/s\n\t\t\t\tsession %s\n\t\t\t}\n",
		admit, lineSession)
	cfg := strings.Replace(n.caddyfile(fsyncAlways), "pay_within 15m\n", room, 1)
	if !strings.Contains(cfg, "waiting_room") {
		n.e.t.Fatal("no activity block to put the waiting room in")
	}
	if err := os.WriteFile(n.cfg, []byte(cfg), 0o600); err != nil {
		n.e.t.Fatal(err)
	}
}

// lineAnswer is what a buyer was told of its place.
type lineAnswer struct {
	state           string
	position, until int64 // until: admitted_until_ms, 0 when not told
}

// lineBuyer is one buyer of scenario 16 and everything it was told.
type lineBuyer struct {
	buyer
	late bool // joins after the start

	mu       sync.Mutex
	joined   bool  // a join was answered 200
	position int64 // the first position told (0 before the draw)
	until    int64 // the first admitted_until_ms told
	bought   int   // 202 answers
	final    string
	err      error
}

// call sends one request and decodes the JSON answer; status 0 is no answer (the node is down).
func lineCall(hc *http.Client, method, url, tok, key string) (int, map[string]any) {
	req, err := http.NewRequest(method, url, bytes.NewReader(nil))
	if err != nil {
		return 0, nil
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, nil
	}
	defer func() { _ = res.Body.Close() }()
	var body map[string]any
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return 0, nil
	}
	return res.StatusCode, body
}

func num(body map[string]any, k string) int64 {
	f, _ := body[k].(float64)
	return int64(f)
}

// note records a queue answer, failing the buyer when it contradicts an earlier one.
func (b *lineBuyer) note(body map[string]any) lineAnswer {
	a := lineAnswer{state: fmt.Sprint(body["state"]), position: num(body, "position"), until: num(body, "admitted_until_ms")}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.joined = true
	switch {
	case a.position > 0 && b.position > 0 && a.position != b.position:
		b.err = fmt.Errorf("%s told position %d, earlier %d", b.user, a.position, b.position)
	case a.until > 0 && b.until > 0 && a.until != b.until:
		b.err = fmt.Errorf("%s told admitted until %d, earlier %d", b.user, a.until, b.until)
	}
	if b.position == 0 {
		b.position = a.position
	}
	if b.until == 0 {
		b.until = a.until
	}
	return a
}

// run joins the line at its moment, polls until admitted, then asks for the buy path and buys with
// its key; every call is retried while the node is down. It ends on a definite end: bought,
// refused, closed or expired.
func (b *lineBuyer) run(ctx context.Context, n *localNode, at time.Time, joins *atomic.Int64) {
	hc := &http.Client{Timeout: 5 * time.Second}
	base := n.base + "/seckill/" + n.e.act.id
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	// A call without an answer (the node is down) is retried soon; a poll every 300 ms.
	retry := func() bool { return pause(50 * time.Millisecond) }
	time.Sleep(time.Until(at))
	var a lineAnswer
	for {
		status, body := lineCall(hc, http.MethodPost, base+"/queue", b.token, "")
		if status == http.StatusOK {
			a = b.note(body)
			joins.Add(1)
			break
		}
		if status == http.StatusGone { // sold out before this buyer came: no place to keep
			b.end("sold_out_before_joining")
			return
		}
		if status != 0 && status != http.StatusServiceUnavailable {
			b.fail(fmt.Errorf("%s joins: %d %v", b.user, status, body))
			return
		}
		if !retry() {
			return
		}
	}
	for a.state == "waiting" {
		if !pause(300 * time.Millisecond) {
			return
		}
		status, body := lineCall(hc, http.MethodGet, base+"/queue", b.token, "")
		switch {
		case status == http.StatusOK:
			a = b.note(body)
		case status != 0 && status != http.StatusServiceUnavailable:
			b.fail(fmt.Errorf("%s polls: %d %v", b.user, status, body))
			return
		}
	}
	if a.state != "admitted" {
		b.end(a.state)
		return
	}
	for {
		status, body := lineCall(hc, http.MethodPost, base+"/path", b.token, "")
		switch {
		case status == http.StatusOK:
			path, _ := body["path"].(string)
			b.buy(ctx, hc, n.base+path, retry)
			return
		case status == http.StatusGone:
			b.end("sold_out")
			return
		case status != 0 && status != http.StatusServiceUnavailable:
			b.fail(fmt.Errorf("%s asks for the path while admitted: %d %v", b.user, status, body))
			return
		}
		if !retry() {
			return
		}
	}
}

func (b *lineBuyer) buy(ctx context.Context, hc *http.Client, url string, retry func() bool) {
	for {
		status, body := lineCall(hc, http.MethodPost, url, b.token, b.key)
		switch status {
		case http.StatusAccepted:
			b.mu.Lock()
			b.bought++
			b.mu.Unlock()
			b.end("bought")
			return
		case http.StatusGone:
			b.end("sold_out")
			return
		case 0, http.StatusServiceUnavailable:
		default:
			b.fail(fmt.Errorf("%s buys: %d %v", b.user, status, body))
			return
		}
		if !retry() {
			return
		}
	}
}

func (b *lineBuyer) end(s string) {
	b.mu.Lock()
	b.final = s
	b.mu.Unlock()
}

func (b *lineBuyer) fail(err error) {
	b.mu.Lock()
	b.err = err
	b.mu.Unlock()
}

// TestLocalLineKilled is scenario 16: a store-local node with a waiting room, whose buyers join
// half before the start (the lottery's pre-queue) and half after it, is SIGKILLed again and again,
// each kill once new places were answered, and started again on its folder. Every place answered
// is kept (the same position, the same admission time), the positions are 1..n with no gap or
// repeat, the admissions come in the order of the positions an interval apart, nothing is
// oversold, and the node's reconcile passes.
func TestLocalLineKilled(t *testing.T) {
	m := currentMode()
	rounds, users := 4, 160
	if m.full {
		rounds, users = 10, 800
	}
	if testing.Short() {
		t.Skip("the chaos suite builds and runs real servers")
	}
	bins.build(t) // first: the sale's start counts from the node's
	// The line admits the early half in 8 s, the late half in the next 8 s; the stock, three
	// quarters of the buyers, sells out among the late ones, once every late buyer has joined.
	admit := users / 16
	stock := int64(users * 3 / 4)
	act := newActivity("local-line", stock, 1)
	act.start = time.Now().Truncate(time.Second).Add(15 * time.Second)
	n := startLocalNode(t, act)
	n.stop()
	writeLineConfig(n, true, admit)
	n.restart()
	pre := time.Until(act.start) - time.Second
	if pre < 3*time.Second {
		t.Fatalf("the node took too long to start: %s left before the sale's start", pre)
	}

	buyers := makeBuyers(t, "ll", users, 1)
	lbs := make([]*lineBuyer, users)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var joins atomic.Int64
	var wg sync.WaitGroup
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for i, b := range buyers {
		lb := &lineBuyer{buyer: b, late: i%2 == 1}
		lbs[i] = lb
		// Early joiners spread over the pre-queue, late ones over the first 8 s of the sale.
		at := time.Now().Add(time.Duration(rng.Int64N(int64(pre))))
		if lb.late {
			at = act.start.Add(200*time.Millisecond + time.Duration(rng.Int64N(int64(8*time.Second))))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lb.run(ctx, n, at, &joins)
		}()
	}

	need := int64(max(users/(2*rounds), 2))
	before, after := 0, 0
	for round := 1; round <= rounds; round++ {
		if round > rounds/2 {
			// The second half of the kills come after the start.
			time.Sleep(time.Until(act.start.Add(300 * time.Millisecond)))
		}
		// Each kill waits for new places, answered since the last restart.
		base := joins.Load()
		waitFor(t, fmt.Sprintf("round %d: %d new places", round, need), time.Minute, func() bool {
			n.failIfExited()
			return joins.Load() >= base+need
		})
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		n.kill()
		when := "after"
		if time.Now().Before(act.start) {
			when = "before"
			before++
		} else {
			after++
		}
		always := (round/2)%2 == 0
		writeLineConfig(n, always, admit)
		began := time.Now()
		n.restart()
		t.Logf("round %d: killed at %d places answered (%s the start); restarted (fsync always: %v) in %s",
			round, joins.Load(), when, always,
			time.Since(began).Round(time.Millisecond))
	}
	wg.Wait()
	if before == 0 || after == 0 {
		t.Errorf("%d kills before the start, %d after: want both", before, after)
	}

	// Every buyer is in the line where it was told, and admission times are in the order of the
	// positions, an interval apart; nobody lost a place or got two.
	hc := &http.Client{Timeout: 5 * time.Second}
	byPos := map[int64]*lineBuyer{}
	bought, outside := 0, 0
	for _, lb := range lbs {
		if lb.err != nil {
			t.Error(lb.err)
			continue
		}
		if lb.final == "sold_out_before_joining" {
			outside++
			continue
		}
		if !lb.joined {
			t.Errorf("%s never had a join answered", lb.user)
			continue
		}
		status, body := lineCall(hc, http.MethodGet, n.base+"/seckill/"+act.id+"/queue", lb.token, "")
		if status != http.StatusOK {
			t.Errorf("%s's place at the end: %d %v", lb.user, status, body)
			continue
		}
		a := lb.note(body)
		if lb.err != nil {
			t.Error(lb.err)
		}
		if other := byPos[a.position]; other != nil || a.position < 1 || a.position > int64(users) {
			t.Errorf("%s at position %d, out of 1..%d or taken (%v)", lb.user, a.position, users, other != nil)
		}
		byPos[a.position] = lb
		bought += lb.bought
	}
	if len(byPos) != users-outside {
		t.Errorf("%d positions for %d buyers in the line", len(byPos), users-outside)
	}
	var times []int64
	for p := int64(1); p <= int64(len(byPos)); p++ {
		lb := byPos[p]
		if lb == nil {
			t.Errorf("position %d is skipped", p)
			continue
		}
		if lb.until > 0 {
			at := lb.until - lineSession.Milliseconds()
			if k := len(times); k > 0 && at-times[k-1] < int64(1000/admit)-1 {
				t.Errorf("position %d admitted %d ms after the one before it; want at least %d", p, at-times[k-1], 1000/admit)
			}
			times = append(times, at)
		}
	}
	snap, err := n.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if snap.Sold > stock || int64(bought) > stock {
		t.Errorf("oversold: %d sold, %d buyers answered 202, stock %d", snap.Sold, bought, stock)
	}
	waitFor(t, "reconcile on the node", m.drain, func() bool {
		ok, _ := n.reconciled()
		return ok
	})
	t.Logf("%d buyers (%d late, %d came after the sell-out), %d kills (%d before the start); positions 1..%d; "+
		"%d admission times told, in order; %d bought of %d",
		users, users/2, outside, before+after, before, len(byPos), len(times), bought, stock)
}

package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// request is one fetch the page made, as recordRequests keeps it.
type request struct {
	Method string  `json:"method"`
	URL    string  `json:"url"`
	Key    string  `json:"key"`
	At     float64 `json:"at"`     // Unix ms on the machine's real clock (performance.timeOrigin based)
	Status int     `json:"status"` // 0 until answered
}

func requests(tb *tab, part string) []request {
	tb.t.Helper()
	all := eval[[]request](tb, `window.__requests`)
	var out []request
	for _, r := range all {
		if strings.Contains(r.URL, part) {
			out = append(out, r)
		}
	}
	return out
}

// clockSlack is how early the page may act by its own account: the uncertainty of its clock
// estimate (half the best round trip), plus the polling of the test.
func clockSlack(tb *tab) time.Duration {
	ms := eval[float64](tb, `window.seckillSale.clock.uncertainty`)
	return time.Duration(ms*float64(time.Millisecond)) + 60*time.Millisecond
}

// parseCountdown reads the page's H:MM:SS (or "Nd HH:MM:SS") countdown.
func parseCountdown(t *testing.T, s string) time.Duration {
	t.Helper()
	var days int
	if d, rest, ok := strings.Cut(strings.TrimSpace(s), "d "); ok {
		n, err := strconv.Atoi(d)
		if err != nil {
			t.Fatalf("countdown %q: %v", s, err)
		}
		days, s = n, rest
	}
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		t.Fatalf("countdown %q is not H:MM:SS", s)
	}
	var secs int
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("countdown %q: %v", s, err)
		}
		secs = secs*60 + n
	}
	return time.Duration(days*86400+secs) * time.Second
}

const (
	phaseIs     = `document.getElementById("sale").dataset.phase === %q`
	buyOpen     = `!document.getElementById("buy").disabled`
	orderStatus = `document.getElementById("order").dataset.status === %q`
	messageIs   = `document.getElementById("message").dataset.code === %q`
)

// The countdown, the Buy button and the path fetch follow the gateway's clock, not the device's:
// the page's Date is an hour behind, and everything still happens on the sale's time.
func TestCountdownFollowsServerClock(t *testing.T) {
	t.Parallel()
	const reveal = 2 * time.Second
	start := saleStart(8 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{{id: "clock", stock: 5, limit: 1, start: start, reveal: reveal}}})
	tb := newTab(t, "alice", phone, shiftClock(-time.Hour), recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "clock", "alice")))
	tb.waitFor("the countdown", fmt.Sprintf(phaseIs, "upcoming"), 10*time.Second)

	// The page really lives an hour in the past...
	skew := time.Duration(eval[float64](tb, `Date.now()`)-float64(time.Now().UnixMilli())) * time.Millisecond
	if skew > -time.Hour+10*time.Second || skew < -time.Hour-10*time.Second {
		t.Fatalf("the page's clock is off by %v, want about -1h: the clock shift did not apply", skew)
	}
	// ...yet counts down to the sale's start on the gateway's clock.
	shown := parseCountdown(t, tb.text("#countdown"))
	left := time.Until(start)
	if d := shown - left; d < -1500*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("countdown shows %v with %v left on the gateway's clock", shown, left)
	}
	if note := tb.text("#clock-note"); !strings.Contains(note, "1 h") || !strings.Contains(note, "behind") {
		t.Errorf("clock note = %q, want it to say the device is 1 h behind", note)
	}
	if h := eval[string](tb, `location.hash`); h != "" {
		t.Errorf("the token stays in the address: %q", h)
	}

	// Before the start the button is closed, and pressing it sends nothing.
	if !eval[bool](tb, `document.getElementById("buy").disabled`) {
		t.Fatal("the Buy button is enabled before the start")
	}
	tb.shot("before-start")
	tb.do(chromedp.Click(chromedp.ID("buy")))

	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	if early, slack := time.Until(start), clockSlack(tb); early > slack {
		t.Fatalf("the Buy button opened %v before the sale's start (the clock estimate allows %v)", early, slack)
	}
	if buys := requests(tb, "/buy/"); len(buys) != 0 {
		t.Fatalf("buy requests sent while the button was closed: %+v", buys)
	}
	// The hashed path was fetched at the reveal instant (start - reveal), never before it.
	paths := requests(tb, "/path")
	if len(paths) != 1 {
		t.Fatalf("path requests = %+v, want exactly one", paths)
	}
	revealAt := float64(start.Add(-reveal).UnixMilli())
	if at := paths[0].At; at < revealAt-100 || at > float64(start.UnixMilli()) {
		t.Fatalf("the path was fetched %.0f ms after the reveal instant, want within [-100ms, reveal]", at-revealAt)
	}
	tb.shot("open")

	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	if code := tb.messageCode(); code != "queued" {
		t.Errorf("message code = %q, want queued", code)
	}
	if got := g.remaining(t, "clock"); got != 4 {
		t.Errorf("remaining = %d, want 4", got)
	}
	tb.shot("queued")

	// No order backend runs here, so the result stays "queued": the page keeps asking, backing
	// off, never in a tight loop.
	time.Sleep(4 * time.Second)
	polls := requests(tb, "/result")
	if len(polls) < 3 || len(polls) > 10 {
		t.Fatalf("%d result requests in 4 s of waiting, want a few (exponential backoff)", len(polls))
	}
	for i := 2; i < len(polls); i++ {
		if gap := polls[i].At - polls[i-1].At; gap < 240 {
			t.Fatalf("result polls %.0f ms apart, want at least 250 ms: %+v", gap, polls)
		}
	}
}

// The whole purchase: the closed button, a double click that is one purchase, the queue, the
// order with its pay-before countdown, the payment. Captcha off; the order backend runs in the
// gateway.
func TestPurchaseEndToEnd(t *testing.T) {
	t.Parallel()
	start := saleStart(7 * time.Second)
	// A limit of 2 lets a second purchase through: only the idempotency key keeps it to one.
	g := startGateway(t, gatewayConf{orders: true, sales: []saleConf{{id: "e2e", stock: 3, limit: 2, start: start, reveal: time.Second}}})
	tb := newTab(t, "alice", phone, recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "e2e", "alice")))
	tb.waitFor("the countdown", fmt.Sprintf(phaseIs, "upcoming"), 10*time.Second)
	if !eval[bool](tb, `document.getElementById("buy").disabled`) {
		t.Fatal("the Buy button is enabled before the start")
	}
	if got := tb.text("#stock"); got != "3 left" {
		t.Errorf("stock = %q, want 3 left", got)
	}
	tb.shot("waiting")

	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	tb.doubleClick("buy")
	tb.waitFor("the order", fmt.Sprintf(orderStatus, "pending_payment"), 20*time.Second)
	if got := g.remaining(t, "e2e"); got != 2 {
		t.Fatalf("remaining = %d after a double click, want 2 (one purchase)", got)
	}
	keys := map[string]bool{}
	for _, r := range requests(tb, "/buy/") {
		keys[r.Key] = true
	}
	if len(keys) != 1 || keys[""] {
		t.Fatalf("buy requests carried Idempotency-Keys %v, want one key", keys)
	}
	orderID := tb.text("#order-id")
	if orderID == "" {
		t.Fatal("no order id shown")
	}
	due := parseCountdown(t, tb.text("#order-due"))
	if due < 14*time.Minute || due > 15*time.Minute {
		t.Errorf("pay-before countdown = %v, want just under 15m", due)
	}
	if code := tb.messageCode(); code != "pending_payment" {
		t.Errorf("message code = %q, want pending_payment", code)
	}
	tb.shot("pending-payment")

	tb.do(chromedp.Click(chromedp.ID("pay")))
	tb.waitFor("the payment", fmt.Sprintf(orderStatus, "paid"), 10*time.Second)
	if code := tb.messageCode(); code != "paid" {
		t.Errorf("message code = %q, want paid", code)
	}
	st, body := g.call(t, http.MethodGet, "/orders/"+orderID, "alice", nil)
	if st != http.StatusOK || body["status"] != "paid" {
		t.Fatalf("GET /orders/%s = %d %v, want paid", orderID, st, body)
	}
	tb.shot("paid")

	// The same buyer on a desktop later: the page finds the paid order on load.
	desk := newTab(t, "alice-desktop", desktop)
	desk.do(chromedp.Navigate(g.pageURL(t, "e2e", "alice")))
	desk.waitFor("the paid order", fmt.Sprintf(orderStatus, "paid"), 10*time.Second)
	desk.shot("paid")
}

// A buy whose answer is lost on the way back is retried with the same Idempotency-Key, and the
// gateway answers the first purchase again: one purchase, not two.
func TestLostAnswerRetryIsOnePurchase(t *testing.T) {
	t.Parallel()
	start := saleStart(6 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{{id: "retry", stock: 5, limit: 2, start: start}}})
	tb := newTab(t, "alice", phone, recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "retry", "alice")))
	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)

	eval[bool](tb, `window.__dropNextBuyAnswer = true`)
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the network message", fmt.Sprintf(messageIs, "network"), 10*time.Second)
	if got := g.remaining(t, "retry"); got != 4 {
		t.Fatalf("remaining = %d, want 4: the lost buy should have reached the gateway", got)
	}
	tb.shot("answer-lost")

	tb.waitFor("the Buy button to open again", buyOpen, 5*time.Second)
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	buys := requests(tb, "/buy/")
	if len(buys) != 2 || buys[0].Key == "" || buys[0].Key != buys[1].Key {
		t.Fatalf("buy requests = %+v, want two with the same Idempotency-Key", buys)
	}
	if got := g.remaining(t, "retry"); got != 4 {
		t.Fatalf("remaining = %d after the retry, want 4 (one purchase)", got)
	}
}

// Refusals are shown as clear messages: sold out (another buyer took the last item) and the
// per-buyer limit (this buyer already bought in another tab). Bob uses the keyboard only.
func TestSoldOutAndLimitMessages(t *testing.T) {
	t.Parallel()
	start := saleStart(7 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{
		{id: "last-one", stock: 1, limit: 1, start: start},
		{id: "one-each", stock: 5, limit: 1, start: start},
	}})
	bob := newTab(t, "bob", phone)
	bob.do(chromedp.Navigate(g.pageURL(t, "last-one", "bob")))
	alice := newTab(t, "alice", phone)
	alice.do(chromedp.Navigate(g.pageURL(t, "one-each", "alice")))
	bob.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	alice.waitFor("the Buy button to open", buyOpen, 10*time.Second)
	// The page fetches its buy path at the opening instant; fetched after zed's win, that path
	// call answers sold_out and the page closes Buy before Bob reaches it (a CI run did).
	bob.waitFor("the buy path", `window.seckillSale.path !== null`, 10*time.Second)

	if code := g.buy(t, "last-one", "zed"); code != "queued" {
		t.Fatalf("zed's buy = %q, want queued", code)
	}
	bob.pressTabUntil("buy", 10)
	bob.do(chromedp.KeyEvent("\r"))
	bob.waitFor("the sold-out message", fmt.Sprintf(messageIs, "sold_out"), 10*time.Second)
	if got := bob.text("#message"); !strings.Contains(got, "Sold out") {
		t.Errorf("message = %q", got)
	}
	if got := bob.text("#countdown-label"); got != "Sold out" {
		t.Errorf("label = %q, want Sold out", got)
	}
	if !eval[bool](bob, `document.getElementById("buy").disabled`) {
		t.Error("the Buy button stays enabled after sold out")
	}
	bob.shot("sold-out")

	if code := g.buy(t, "one-each", "alice"); code != "queued" {
		t.Fatalf("alice's buy in another tab = %q, want queued", code)
	}
	alice.do(chromedp.Click(chromedp.ID("buy")))
	alice.waitFor("the limit message", fmt.Sprintf(messageIs, "limit_reached"), 10*time.Second)
	// The page then shows the order she already has.
	alice.waitFor("her existing order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	alice.shot("limit-reached")
}

// With the captcha on, the image renders, a new one can be asked for, and a wrong answer is
// caught at the reveal instant with a new image and the focus back in the answer field.
func TestCaptcha(t *testing.T) {
	t.Parallel()
	const reveal = 2 * time.Second
	start := saleStart(9 * time.Second)
	g := startGateway(t, gatewayConf{captcha: true, sales: []saleConf{{id: "human", stock: 5, limit: 1, start: start, reveal: reveal}}})
	tb := newTab(t, "alice", phone, recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "human", "alice")))
	const loaded = `(() => { const i = document.getElementById("captcha-image");
		return !document.getElementById("captcha").hidden && i.complete && i.naturalWidth > 0 && i.src; })()`
	tb.waitFor("the captcha image", loaded, 10*time.Second)
	first := eval[string](tb, `document.getElementById("captcha-image").src`)
	if w := eval[int](tb, `document.getElementById("captcha-image").naturalWidth`); w < 100 {
		t.Errorf("captcha image is %d px wide", w)
	}
	tb.shot("captcha")

	// "Hear the digits" fetches the captcha's WAV once and plays it; a second press replays it.
	tb.do(chromedp.Click(chromedp.ID("captcha-listen")))
	tb.waitFor("the digits spoken", `(() => { const a = document.getElementById("captcha-audio");
		return a.src.startsWith("blob:") && a.readyState >= 1 && a.duration > 1; })()`, 10*time.Second)
	tb.do(chromedp.Click(chromedp.ID("captcha-listen")))
	if wavs := requests(tb, ".wav"); len(wavs) != 1 || wavs[0].Status != http.StatusOK {
		t.Errorf("audio fetches = %+v, want one answered 200", wavs)
	}

	tb.do(chromedp.Click(chromedp.ID("captcha-new")))
	tb.waitFor("a new image", fmt.Sprintf(`document.getElementById("captcha-image").src !== %q && %s`, first, loaded), 10*time.Second)
	second := eval[string](tb, `document.getElementById("captcha-image").src`)

	// Five zeros: a wrong answer but for a one-in-100,000 draw.
	tb.do(chromedp.SendKeys(chromedp.ID("captcha-answer"), "00000"))
	tb.waitFor("the captcha_invalid message", fmt.Sprintf(messageIs, "captcha_invalid"), 20*time.Second)
	paths := requests(tb, "/path")
	if len(paths) != 1 || paths[0].At < float64(start.Add(-reveal).UnixMilli())-100 {
		t.Fatalf("path requests = %+v, want one, at or after the reveal instant", paths)
	}
	tb.waitFor("a fresh image", fmt.Sprintf(`document.getElementById("captcha-image").src !== %q && %s`, second, loaded), 10*time.Second)
	if v := eval[string](tb, `document.getElementById("captcha-answer").value`); v != "" {
		t.Errorf("answer field = %q, want it cleared", v)
	}
	if id := eval[string](tb, `document.activeElement?.id ?? ""`); id != "captcha-answer" {
		t.Errorf("focus is on %q, want the answer field", id)
	}
	// On a 390 px phone the buyer sees why, and where to type again, without scrolling.
	tb.waitFor("the message and the answer field in view", `(() => {
		const inView = (id) => { const r = document.getElementById(id).getBoundingClientRect();
			return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight; };
		return window.innerWidth === 390 && inView("message") && inView("captcha-answer");
	})()`, 5*time.Second)
	tb.shot("captcha-invalid")
}

// A buyer without a token, with the keyboard only: the demo sign-in explains how to get a token
// when the gateway does not offer it (the default), a pasted token signs in, and Enter buys.
func TestKeyboardOnlySignIn(t *testing.T) {
	t.Parallel()
	start := saleStart(10 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{{id: "keys", stock: 5, limit: 1, start: start}}})
	tb := newTab(t, "carol", phone)
	tb.do(chromedp.Navigate(g.pageURL(t, "keys", "")))
	tb.waitFor("the sign-in form", `!document.getElementById("signin").hidden`, 10*time.Second)
	if code := tb.messageCode(); code != "" {
		t.Errorf("message code = %q, want none: the sign-in form says what to do", code)
	}

	tb.pressTabUntil("signin-user", 5)
	tb.do(chromedp.KeyEvent("\b\b\b\b\bcarol"))
	tb.pressTabUntil("signin-button", 2)
	tb.do(chromedp.KeyEvent("\r"))
	tb.waitFor("the demo sign-in message", fmt.Sprintf(messageIs, "demo_signin_off"), 10*time.Second)
	if got := tb.text("#message"); !strings.Contains(got, "caddy seckill token --user") {
		t.Errorf("message = %q, want the command that makes a token", got)
	}
	tb.shot("demo-signin-off")

	tb.pressTabUntil("signin-paste", 3)
	tb.do(chromedp.KeyEvent("\r"))
	tb.pressTabUntil("signin-token", 2)
	tb.do(chromedp.KeyEvent(g.token(t, "carol")))
	tb.pressTabUntil("signin-token-use", 2)
	tb.do(chromedp.KeyEvent("\r"))
	tb.waitFor("the signed-in account", `!document.getElementById("account").hidden`, 10*time.Second)
	if got := tb.text("#account-name"); got != "Signed in as carol" {
		t.Errorf("account = %q", got)
	}

	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	tb.pressTabUntil("buy", 10)
	tb.do(chromedp.KeyEvent("\r"))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	if id := eval[string](tb, `document.activeElement?.id ?? ""`); id != "order" {
		t.Errorf("focus is on %q after the buy, want the order", id)
	}
}

// The page's building blocks, run as ES modules in the browser: the clock estimator, the
// backoff, Retry-After, the countdown format and the configuration guard.
func TestModules(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.FileServerFS(Files))
	t.Cleanup(srv.Close)
	tb := newTab(t, "modules", desktop)
	tb.do(chromedp.Navigate(srv.URL + "/clock.js"))

	type results struct {
		Now         float64   `json:"now"`
		Uncertainty float64   `json:"uncertainty"`
		Kept        []bool    `json:"kept"`
		AfterJump   float64   `json:"afterJump"`
		Format      []string  `json:"format"`
		Far         []string  `json:"far"`
		Tick        []float64 `json:"tick"`
		BackoffLo   []float64 `json:"backoffLo"`
		BackoffHi   []float64 `json:"backoffHi"`
		RetryAfter  []float64 `json:"retryAfter"`
		Config      []string  `json:"config"`
	}
	r := eval[results](tb, `(async () => {
		const { ServerClock, formatCountdown, countdownText, msUntilTick } = await import("/clock.js");
		const { backoffDelay, retryAfterMs } = await import("/backoff.js");
		const { readConfig } = await import("/config.js");
		const out = {};
		let mono = 0;
		const c = new ServerClock(() => mono);
		out.kept = [
			c.add(0, 100, 1000000),   // rtt 100: the first estimate
			c.add(200, 220, 1000130), // rtt 20, consistent: better, kept
			c.add(300, 400, 1000230), // rtt 100, consistent: worse, dropped
		];
		mono = 1000;
		out.now = c.now();            // 1000130 + 10 + (1000 - 220)
		out.uncertainty = c.uncertainty;
		c.add(2000, 2010, 5000000);   // the device slept: inconsistent, so it replaces the best
		mono = 2010;
		out.afterJump = c.now();
		out.format = [0, 200, 1000, 61000, 90061000].map(formatCountdown);
		out.far = [90061000, 172800000, 172801000, 3315 * 86400000].map((ms) => countdownText(ms) ?? "date");
		out.tick = [msUntilTick(10500, 10000), msUntilTick(11000, 10000)];
		const at = [0, 1, 2, 3, 10, 30];
		out.backoffLo = at.map((a) => backoffDelay(a, { random: () => 0 }));
		out.backoffHi = at.map((a) => backoffDelay(a, { random: () => 1 }));
		out.retryAfter = [retryAfterMs("3"), retryAfterMs(""), retryAfterMs("soon"),
			retryAfterMs("Wed, 21 Oct 2015 07:28:05 GMT", "Wed, 21 Oct 2015 07:28:00 GMT")];
		const root = { dataset: { activity: "from-data" } };
		const tryConfig = (search) => { try { const c = readConfig(root, search); return c.activity + " " + c.base + " " + c.signin; } catch (e) { return "refused"; } };
		out.config = [tryConfig(""), tryConfig("?activity=phone-1001&api=/shop/seckill"),
			tryConfig("?api=//evil.example/x"), tryConfig("?api=https://evil.example/"), tryConfig("?activity=a/b")];
		return out;
	})()`)

	if want := []bool{true, true, false}; fmt.Sprint(r.Kept) != fmt.Sprint(want) {
		t.Errorf("samples kept = %v, want %v (the lowest round trip wins)", r.Kept, want)
	}
	if r.Now != 1000920 || r.Uncertainty != 10 {
		t.Errorf("estimate = %v ± %v, want 1000920 ± 10", r.Now, r.Uncertainty)
	}
	if r.AfterJump != 5000005 {
		t.Errorf("after a jump = %v, want 5000005 (the inconsistent sample replaces the best)", r.AfterJump)
	}
	if want := []string{"00:00:00", "00:00:01", "00:00:01", "00:01:01", "1d 01:01:01"}; fmt.Sprint(r.Format) != fmt.Sprint(want) {
		t.Errorf("format = %q, want %q", r.Format, want)
	}
	// Two days and less count down; further off, the page shows a date instead.
	if want := []string{"1d 01:01:01", "2d 00:00:00", "date", "date"}; fmt.Sprint(r.Far) != fmt.Sprint(want) {
		t.Errorf("countdownText = %q, want %q", r.Far, want)
	}
	if fmt.Sprint(r.Tick) != "[505 1005]" {
		t.Errorf("ticks = %v, want [505 1005]", r.Tick)
	}
	for i := range r.BackoffLo {
		lo, hi := r.BackoffLo[i], r.BackoffHi[i]
		if lo < 250 || hi > 10000 || hi-2*lo > 1 || 2*lo-hi > 1 {
			t.Errorf("backoff %d = [%v, %v]: want half to all of a capped exponential, never under 250 ms", i, lo, hi)
		}
		if i > 0 && lo < r.BackoffLo[i-1] {
			t.Errorf("backoff shrinks at attempt %d: %v", i, r.BackoffLo)
		}
	}
	if r.BackoffHi[len(r.BackoffHi)-1] != 10000 {
		t.Errorf("backoff cap = %v, want 10000", r.BackoffHi[len(r.BackoffHi)-1])
	}
	if fmt.Sprint(r.RetryAfter) != "[3000 0 0 5000]" {
		t.Errorf("Retry-After = %v, want [3000 0 0 5000]", r.RetryAfter)
	}
	want := []string{"from-data /seckill /demo/token", "phone-1001 /shop/seckill /demo/token", "refused", "refused", "refused"}
	if fmt.Sprint(r.Config) != fmt.Sprint(want) {
		t.Errorf("config = %q, want %q", r.Config, want)
	}
}

// A buy refused with 429 closes the Buy button for the Retry-After the gateway asked for, says
// so, and sends nothing meanwhile: the page does not hammer a server that said "slow down".
func TestRateLimitedHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	start := saleStart(6 * time.Second)
	// One call per 3 s: the path fetched at the reveal instant takes it, so a Buy pressed at the
	// start, a second later, is refused.
	g := startGateway(t, gatewayConf{userRate: "1/3s burst 1", sales: []saleConf{{id: "slow", stock: 5, limit: 1, start: start, reveal: time.Second}}})
	tb := newTab(t, "alice", phone, recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "slow", "alice")))
	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the rate-limited message", fmt.Sprintf(messageIs, "rate_limited"), 10*time.Second)
	refused := time.Now()
	if !eval[bool](tb, `document.getElementById("buy").disabled`) {
		t.Fatal("the Buy button stays enabled after a 429")
	}
	if got := tb.text("#message"); !strings.Contains(got, "opens again in") {
		t.Errorf("message = %q, want it to say when to try again", got)
	}
	tb.shot("rate-limited")

	tb.waitFor("the Buy button to open again", buyOpen, 10*time.Second)
	if held := time.Since(refused); held < 900*time.Millisecond {
		t.Fatalf("the Buy button opened again after %v, before the Retry-After (at least 1 s)", held)
	}
	if buys := requests(tb, "/buy/"); len(buys) != 1 {
		t.Fatalf("buy requests while held = %+v, want only the refused one", buys)
	}
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
}

// At the end of the window the page closes by itself: no countdown, no Buy.
func TestSaleEnds(t *testing.T) {
	t.Parallel()
	end := saleStart(5 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{{id: "closing", stock: 5, limit: 1, start: end.Add(-time.Hour), end: end}}})
	tb := newTab(t, "alice", desktop)
	tb.do(chromedp.Navigate(g.pageURL(t, "closing", "alice")))
	tb.waitFor("the open sale", buyOpen, 10*time.Second)
	tb.shot("open")
	tb.waitFor("the end", fmt.Sprintf(phaseIs, "ended"), 15*time.Second)
	if early, slack := time.Until(end), clockSlack(tb); early > slack {
		t.Fatalf("the page closed the sale %v before its end (the clock estimate allows %v)", early, slack)
	}
	if !eval[bool](tb, `document.getElementById("buy").disabled && document.getElementById("countdown").hidden`) {
		t.Fatal("after the end, want the Buy button disabled and the countdown hidden")
	}
	if got := tb.text("#countdown-label"); got != "The sale has ended" {
		t.Errorf("label = %q", got)
	}
	tb.shot("ended")
}

// An order left unpaid: the pay-before countdown runs out on the sale's clock, the page says the
// order expired, and follows it until the gateway has cancelled it and put the item back.
func TestUnpaidOrderExpires(t *testing.T) {
	t.Parallel()
	start := saleStart(6 * time.Second)
	g := startGateway(t, gatewayConf{orders: true, sales: []saleConf{{id: "unpaid", stock: 2, limit: 1, start: start, payWithin: 4 * time.Second}}})
	tb := newTab(t, "alice", phone)
	tb.do(chromedp.Navigate(g.pageURL(t, "unpaid", "alice")))
	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the order", fmt.Sprintf(orderStatus, "pending_payment"), 20*time.Second)
	if due := parseCountdown(t, tb.text("#order-due")); due > 4*time.Second {
		t.Errorf("pay-before countdown = %v, want at most 4s", due)
	}
	tb.waitFor("the expiry", `document.getElementById("order-due").innerText === "Time is up"`, 10*time.Second)
	if !eval[bool](tb, `document.getElementById("pay").disabled`) {
		t.Error("the Pay button stays enabled after the payment window")
	}
	tb.waitFor("the cancelled order", fmt.Sprintf(orderStatus, "cancelled"), 20*time.Second)
	if eval[bool](tb, `!document.getElementById("pay").hidden`) {
		t.Error("the Pay button is still shown for a cancelled order")
	}
	// The order turns cancelled first; the outbox relay then gives the item back, and the status
	// call's reading may be up to a second old: the stock returns soon after, not at once.
	got, deadline := g.remaining(t, "unpaid"), time.Now().Add(5*time.Second)
	for got != 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		got = g.remaining(t, "unpaid")
	}
	if got != 2 {
		t.Errorf("remaining = %d 5 s after the cancellation, want 2 (the item back on sale)", got)
	}
	tb.shot("cancelled")
}

// With the gateway's demo sign-in on, the button signs the buyer in with a token the gateway
// minted, and that token buys.
func TestDemoSignIn(t *testing.T) {
	t.Parallel()
	start := saleStart(7 * time.Second)
	g := startGateway(t, gatewayConf{demo: true, sales: []saleConf{{id: "demo", stock: 5, limit: 1, start: start}}})
	tb := newTab(t, "dave", desktop)
	tb.do(chromedp.Navigate(g.url + "/"))
	tb.waitFor("the sign-in form", `!document.getElementById("signin").hidden`, 10*time.Second)
	tb.do(chromedp.SetValue(chromedp.ID("signin-user"), "dave"), chromedp.Click(chromedp.ID("signin-button")))
	tb.waitFor("the signed-in account", `!document.getElementById("account").hidden`, 10*time.Second)
	if got := tb.text("#account-name"); got != "Signed in as dave" {
		t.Errorf("account = %q", got)
	}
	if got := eval[string](tb, `localStorage.getItem("seckill.token") ?? ""`); strings.Count(got, ".") != 2 {
		t.Errorf("stored token = %q, want a JWT", got)
	}
	tb.shot("signed-in")
	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	st, body := g.call(t, http.MethodGet, "/seckill/demo/result", "dave", nil)
	if st != http.StatusOK || body["code"] != "queued" {
		t.Fatalf("dave's result = %d %v, want queued", st, body)
	}
}

// While the store is down the gateway answers 503 busy with Retry-After; the page says so and
// retries the same purchase after each Retry-After (never sooner), and the purchase goes through
// once the store is back.
func TestBusyRetriesAfterRetryAfter(t *testing.T) {
	t.Parallel()
	if env.skip != "" {
		t.Skip(env.skip) // before starting Redis
	}
	rdb := testsrv.StartRedis(t, testsrv.WithAOF("always"))
	start := saleStart(7 * time.Second)
	g := startGateway(t, gatewayConf{redis: rdb.Addr, sales: []saleConf{{id: "busy", stock: 5, limit: 1, start: start}}})
	tb := newTab(t, "alice", phone, recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "busy", "alice")))
	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)

	rdb.Stop()
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the busy message", fmt.Sprintf(messageIs, "busy"), 10*time.Second)
	if got := tb.text("#message"); !strings.Contains(got, "Trying again in") {
		t.Errorf("message = %q, want it to say when the page tries again", got)
	}
	tb.shot("busy")
	rdb.Restart()

	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 20*time.Second)
	buys := requests(tb, "/buy/")
	if len(buys) < 2 || len(buys) > 4 {
		t.Fatalf("%d buy requests, want the first and 1 to 3 automatic retries: %+v", len(buys), buys)
	}
	for i := 1; i < len(buys); i++ {
		if buys[i].Key != buys[0].Key {
			t.Fatalf("retry %d changed the Idempotency-Key: %+v", i, buys)
		}
		if gap := buys[i].At - buys[i-1].At; gap < 1000 {
			t.Fatalf("retry %d came %.0f ms after the previous buy, before Retry-After (1 s)", i, gap)
		}
	}
	if got := g.remaining(t, "busy"); got != 4 {
		t.Errorf("remaining = %d, want 4", got)
	}
}

// A page whose clock estimate runs early opens the Buy button a moment before the gateway does:
// the gateway refuses the buy with not_started, the page re-samples its clock and tries the same
// purchase once more when the sale is open.
func TestEarlyBuyIsRetriedOnTime(t *testing.T) {
	t.Parallel()
	start := saleStart(8 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{{id: "early", stock: 5, limit: 1, start: start, reveal: 3 * time.Second}}})
	tb := newTab(t, "alice", phone, recordRequests, skewStatusesUntilBuy(800*time.Millisecond))
	tb.do(chromedp.Navigate(g.pageURL(t, "early", "alice")))
	tb.waitFor("the Buy button to open", buyOpen, 20*time.Second)
	if time.Until(start) < 300*time.Millisecond {
		t.Fatalf("the Buy button opened %v before the start, want about 800ms early (the skew did not apply)", time.Until(start))
	}
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	buys := requests(tb, "/buy/")
	if len(buys) != 2 || buys[0].Status != http.StatusForbidden || buys[1].Status != http.StatusAccepted || buys[0].Key != buys[1].Key {
		t.Fatalf("buy requests = %+v, want a 403 then a 202 with the same Idempotency-Key", buys)
	}
	if buys[1].At < float64(start.UnixMilli()) {
		t.Fatalf("the retry was sent %.0f ms before the start", float64(start.UnixMilli())-buys[1].At)
	}
	if got := g.remaining(t, "early"); got != 4 {
		t.Errorf("remaining = %d, want 4", got)
	}
}

// The page's texts on a phone, for a sale that ends years from now (as the demo of
// Caddyfile.example does): signed out, "sign in" is said once; the end date carries its year; the
// page shows the end's date instead of a countdown of years, on one line; the captcha hint
// follows the phase.
func TestPageTexts(t *testing.T) {
	t.Parallel()
	start := saleStart(15 * time.Second) // the checks before the start take a few seconds on a loaded machine
	end := time.Date(2036, 1, 1, 0, 0, 0, 0, time.UTC)
	g := startGateway(t, gatewayConf{captcha: true, sales: []saleConf{
		{id: "texts", stock: 5, limit: 1, start: start, end: end, reveal: 2 * time.Second, price: "1500 jpy", title: "Green Tea, 20 bags"},
		{id: "plain", stock: 5, limit: 1, start: start, end: end},
	}})
	tb := newTab(t, "texts", phone)
	tb.do(chromedp.Navigate(g.pageURL(t, "texts", "")))
	tb.waitFor("the sign-in form", `!document.getElementById("signin").hidden`, 10*time.Second)
	tb.waitFor("the countdown", fmt.Sprintf(phaseIs, "upcoming"), 10*time.Second)
	if name, price := tb.text("#product-name"), tb.text("#price-now"); name != "Green Tea, 20 bags" || price != "1500 JPY" {
		t.Errorf("name %q, price %q; want the activity's title and price", name, price)
	}
	if title := eval[string](tb, `document.title`); title != "Flash sale · Green Tea, 20 bags" {
		t.Errorf("document title %q", title)
	}
	panel := `document.querySelector(".panel").innerText`
	if n := eval[int](tb, `(`+panel+`.match(/sign in/gi) || []).length`); n != 1 {
		t.Errorf("signed out, the panel says \"sign in\" %d times, want once:\n%s", n, eval[string](tb, panel))
	}
	if hint := eval[bool](tb, `document.getElementById("buy-hint").hidden`); !hint {
		t.Errorf("signed out, the buy hint shows %q", tb.text("#buy-hint"))
	}
	tb.shot("signed-out")

	// Only the fragment differs: the navigation stays in the document, so the page is reloaded.
	tb.do(chromedp.Navigate(g.pageURL(t, "texts", "erin")), chromedp.Reload())
	tb.waitFor("the captcha", `!document.getElementById("captcha").hidden`, 10*time.Second)
	if got := tb.text("#captcha-hint"); got != "Type them now: they are checked when the sale opens." {
		t.Errorf("captcha hint before the start = %q", got)
	}
	tb.waitFor("the sale to open", fmt.Sprintf(phaseIs, "open"), 30*time.Second)
	if got := tb.text("#captcha-hint"); got != "Type them, then press Buy now." {
		t.Errorf("captcha hint once open = %q", got)
	}
	if got := tb.text("#when"); !strings.Contains(got, "2036") && !strings.Contains(got, "2035") {
		t.Errorf("end date %q has no year", got) // 2035 in a time zone west of UTC
	}
	// Years away: the date, not "3315d 09:11:57".
	countdown := tb.text("#countdown")
	if !strings.Contains(countdown, "2036") && !strings.Contains(countdown, "2035") || strings.Contains(countdown, "d ") {
		t.Errorf("countdown %q, want the end's date", countdown)
	}
	if got := tb.text("#countdown-label"); got != "The sale is open until" {
		t.Errorf("label = %q, want \"The sale is open until\"", got)
	}
	lines := `(() => { const r = document.createRange(); r.selectNodeContents(document.getElementById("countdown"));
		return new Set([...r.getClientRects()].map((b) => Math.round(b.top))).size; })()`
	if n := eval[int](tb, lines); n != 1 {
		t.Errorf("countdown %q takes %d lines on a phone, want 1", countdown, n)
	}
	tb.shot("open-long-countdown")

	// An activity without title and price: the page shows its id, and no price of its own.
	tb.do(chromedp.Navigate(g.pageURL(t, "plain", "erin")), chromedp.Reload())
	tb.waitFor("the status", `document.getElementById("product-name").innerText === "plain"`, 10*time.Second)
	if eval[bool](tb, `!document.getElementById("price").hidden`) {
		t.Errorf("without a price the page shows %q", tb.text("#price"))
	}
	if html := eval[string](tb, `document.documentElement.outerHTML`); strings.Contains(html, "$") {
		t.Errorf("the page shows a price of its own:\n%s", html)
	}
}

// TestWaitingRoom: on sales with a waiting room that lets one buyer through every 15 s (a minute),
// Bob takes the first place before the start. Dave waits behind him for the only item of one;
// Bob buys it and Dave's page says the line is closed. Alice's page joins the other line behind
// Bob and Frank, shows her place (3), keeps the Buy button closed and fetches
// no path while she waits, then, admitted, buys as without a room. Carol (desktop) sees her place
// behind Alice; Eve's turn passes unused and the page says it is over.
func TestWaitingRoom(t *testing.T) {
	t.Parallel()
	start := saleStart(3 * time.Second)
	g := startGateway(t, gatewayConf{sales: []saleConf{
		{id: "line", stock: 5, limit: 1, start: start, room: "admit 1/15s"},
		{id: "tiny", stock: 1, limit: 1, start: start, room: "admit 1/m"},
		{id: "brief", stock: 5, limit: 1, start: start, room: "session 2s"},
		{id: "toll", stock: 5, limit: 1, start: start, room: "proof_of_work 12"},
	}})
	st, body := g.call(t, http.MethodGet, "/seckill/line", "", nil)
	if room, _ := body["waiting_room"].(map[string]any); st != http.StatusOK || room == nil {
		t.Fatalf("status = %d %v, want a waiting_room", st, body)
	}
	for _, act := range []string{"line", "tiny"} {
		if st, body := g.call(t, http.MethodPost, "/seckill/"+act+"/queue", "bob", nil); st != http.StatusOK || body["state"] != "waiting" {
			t.Fatalf("bob joins the pre-queue of %s: %d %v", act, st, body)
		}
	}
	// Alice joins after the start, so that she is behind Bob (and not in his lottery).
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := g.call(t, http.MethodGet, "/seckill/line/queue", "bob", nil)
		if body["state"] == "admitted" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob not admitted at the start: %v", body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Dave waits behind Bob for the only item; Bob buys it: Dave's page says the line is closed.
	dave := newTab(t, "dave", phone)
	dave.do(chromedp.Navigate(g.pageURL(t, "tiny", "dave")))
	dave.waitFor("dave's place", `document.getElementById("line").dataset.state === "waiting"`, 15*time.Second)
	if code := g.buy(t, "tiny", "bob"); code != "queued" {
		t.Fatalf("bob's buy of the last item = %q", code)
	}
	dave.waitFor("the line closed", `document.getElementById("line").dataset.state === "closed"`, 20*time.Second)
	if got := dave.text("#line-place"); got != "The line is closed" {
		t.Errorf("dave's line = %q", got)
	}
	if !eval[bool](dave, `document.getElementById("buy").disabled`) {
		t.Error("the Buy button is open on a closed line")
	}
	dave.shot("closed")

	// Frank has just joined the other line, so that Alice's turn is 15 s after his, however long
	// the steps before took.
	if st, body := g.call(t, http.MethodPost, "/seckill/line/queue", "frank", nil); st != http.StatusOK || body["position"] != float64(2) {
		t.Fatalf("frank joins line: %d %v", st, body)
	}
	tb := newTab(t, "alice", phone, recordRequests)
	tb.do(chromedp.Navigate(g.pageURL(t, "line", "alice")))
	tb.waitFor("the place in line", `document.getElementById("line").dataset.state === "waiting" && !document.getElementById("line").hidden`, 15*time.Second)
	if got := tb.text("#line-place"); got != "You are number 3 in line" {
		t.Errorf("place = %q, want number 3", got)
	}
	if got := tb.text("#line-eta"); !strings.HasPrefix(got, "Your turn: in about ") {
		t.Errorf("estimate = %q", got)
	}
	if !eval[bool](tb, `document.getElementById("buy").disabled`) {
		t.Error("the Buy button is open while waiting in line")
	}
	if n := len(requests(tb, "/path")); n != 0 {
		t.Errorf("%d path requests while waiting in line, want none", n)
	}
	// The line box and the Buy button fit the phone's width.
	if w := eval[float64](tb, `document.getElementById("line").getBoundingClientRect().right`); w > 390 {
		t.Errorf("the line box reaches %v px on a 390 px phone", w)
	}
	tb.shot("waiting")

	tb.waitFor("the turn", `document.getElementById("line").dataset.state === "admitted"`, 45*time.Second)
	if code := tb.messageCode(); code != "line_admitted" {
		t.Errorf("message code = %q, want line_admitted", code)
	}
	if got := tb.text("#line-eta"); !strings.HasPrefix(got, "Buy within ") {
		t.Errorf("session = %q, want Buy within …", got)
	}
	tb.waitFor("the Buy button to open", buyOpen, 5*time.Second)
	tb.shot("admitted")
	polls := requests(tb, "/queue")
	if len(polls) < 2 || polls[0].Method != "POST" {
		t.Errorf("queue requests = %+v, want a join then polls", polls)
	}
	tb.do(chromedp.Click(chromedp.ID("buy")))
	tb.waitFor("the queued order", fmt.Sprintf(orderStatus, "queued"), 10*time.Second)
	if got := g.remaining(t, "line"); got != 4 {
		t.Fatalf("remaining = %d, want 4", got)
	}
	if !eval[bool](tb, `document.getElementById("line").hidden`) {
		t.Error("the line is still shown after the win")
	}

	// Carol on a desktop, behind Alice: the page shows her waiting with someone ahead.
	desk := newTab(t, "carol-desktop", desktop)
	desk.do(chromedp.Navigate(g.pageURL(t, "line", "carol")))
	desk.waitFor("carol's place", `document.getElementById("line").dataset.state === "waiting" && !document.getElementById("line").hidden`, 15*time.Second)
	if got := desk.text("#line-place"); got != "You are number 4 in line" {
		t.Errorf("carol's place = %q, want number 4", got)
	}
	desk.shot("waiting")

	// Eve's turn (first in brief's line) lasts 2 s and she lets it pass: the page says it is over.
	eve := newTab(t, "eve", phone)
	eve.do(chromedp.Navigate(g.pageURL(t, "brief", "eve")))
	eve.waitFor("eve's turn to end", `document.getElementById("line").dataset.state === "expired"`, 20*time.Second)
	if got := eve.text("#line-place"); got != "Your turn is over" {
		t.Errorf("eve's line = %q", got)
	}
	if code := eve.messageCode(); code != "line_expired" {
		t.Errorf("eve's message = %q, want line_expired", code)
	}
	if !eval[bool](eve, `document.getElementById("buy").disabled`) {
		t.Error("the Buy button is open after the turn")
	}
	if got := eve.text("#buy-hint"); got != "Your turn has passed." {
		t.Errorf("eve's hint = %q", got)
	}
	eve.shot("expired")

	// Gina's room asks a proof of work: her page fetches a challenge, solves it (web/pow.js) and
	// joins with the answer.
	gina := newTab(t, "gina", phone, recordRequests)
	gina.do(chromedp.Navigate(g.pageURL(t, "toll", "gina")))
	gina.waitFor("gina in the line", `["waiting", "admitted"].includes(document.getElementById("line").dataset.state)`, 30*time.Second)
	challenges := requests(gina, "/queue/challenge")
	if len(challenges) != 1 || challenges[0].Status != http.StatusOK {
		t.Errorf("gina's challenge requests = %+v, want one 200", challenges)
	}
	var joins []request
	for _, r := range requests(gina, "/toll/queue") {
		if r.Method == "POST" {
			joins = append(joins, r)
		}
	}
	if len(joins) != 1 || joins[0].Status != http.StatusOK {
		t.Errorf("gina's queue requests = %+v, want a join answered 200", joins)
	}
	if st, body := g.call(t, http.MethodGet, "/seckill/toll/queue", "gina", nil); st != http.StatusOK || body["position"] != float64(1) {
		t.Errorf("gina's place: %d %v, want position 1", st, body)
	}
}

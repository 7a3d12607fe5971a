package web

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// env is what TestMain prepares for the tests: set once before any test runs, read-only after.
var env struct {
	caddy   string          // the gateway binary, built from cmd/caddy
	browser context.Context // a running headless Chromium; every test opens its own tabs in it
	skip    string          // why the browser tests do not run (-short)
}

// TestMain builds the gateway once and starts one headless Chromium for every test.
func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if testing.Short() {
		env.skip = "-short: the browser tests build cmd/caddy and run Chromium"
		return m.Run()
	}
	chromium, err := findChromium()
	if err != nil {
		fmt.Fprintln(os.Stderr, "web tests:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "seckill-web-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "web tests:", err)
		return 1
	}
	defer removeAll(dir)

	env.caddy = filepath.Join(dir, "caddy")
	build := exec.Command("go", "build", "-o", env.caddy, "github.com/caddy-seckill/caddy-seckill/cmd/caddy")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "web tests: building the gateway (cmd/caddy) failed:", err)
		return 1
	}

	// The flags this machine needs: without the background-networking ones, Chromium's own
	// connections are refused many at a time. Timers are not throttled, so that every tab keeps
	// its countdown on time while others have the focus.
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(dir, "profile")),
	)
	defer cancelAlloc()
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()
	if err := chromedp.Do(browserCtx); err != nil {
		fmt.Fprintln(os.Stderr, "web tests: starting Chromium failed:", err)
		return 1
	}
	env.browser = browserCtx
	return m.Run()
}

// findChromium finds the browser the way scripts/ensure-chromium.sh does.
func findChromium() (string, error) {
	for _, name := range []string{os.Getenv("SECKILL_CHROMIUM"), "chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium found: run scripts/ensure-chromium.sh (installs Debian's chromium as root), or set SECKILL_CHROMIUM")
}

// removeAll removes a folder that Chromium's child processes may still be writing to for a moment.
func removeAll(dir string) {
	for range 50 {
		if err := os.RemoveAll(dir); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Viewports the page is checked on.
var (
	phone   = viewport{390, 844, true}
	desktop = viewport{1280, 860, false}
)

type viewport struct {
	width, height int64
	mobile        bool
}

// tab is one browser tab with its own profile (storage, cookies), so that each buyer is separate.
type tab struct {
	t    *testing.T
	ctx  context.Context
	name string

	mu     sync.Mutex
	errors []string // uncaught exceptions and console.error calls of the page
}

// newTab opens a tab at the given viewport. Each script runs in every page before the page's own
// scripts (to shift the clock, to record requests).
func newTab(t *testing.T, name string, vp viewport, scripts ...string) *tab {
	t.Helper()
	if env.skip != "" {
		t.Skip(env.skip)
	}
	ctx, cancel := chromedp.NewContext(env.browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	tb := &tab{t: t, ctx: ctx, name: name}
	go tb.collectErrors()

	opts := []chromedp.EmulateViewportOption{chromedp.EmulatePortrait}
	if vp.mobile {
		opts = append(opts, chromedp.EmulateMobile, chromedp.EmulateScale(1))
	}
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(vp.width, vp.height, opts...)); err != nil {
		t.Fatalf("viewport: %v", err)
	}
	for _, s := range scripts {
		if _, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: s}); err != nil {
			t.Fatalf("add a script: %v", err)
		}
	}
	t.Cleanup(func() {
		tb.mu.Lock()
		defer tb.mu.Unlock()
		for _, e := range tb.errors {
			t.Errorf("%s: the page reported an error: %s", name, e)
		}
	})
	return tb
}

func (tb *tab) collectErrors() {
	exceptions := chromedp.Events(tb.ctx, runtime.ExceptionThrown)
	console := chromedp.Events(tb.ctx, runtime.ConsoleAPICalled)
	go func() {
		for ev, err := range console {
			if err != nil {
				return
			}
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, strings.Trim(string(a.Value), `"`)+a.Description)
				}
				tb.addError("console.error: " + strings.Join(parts, " "))
			}
		}
	}()
	for ev, err := range exceptions {
		if err != nil {
			return
		}
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		tb.addError(fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
	}
}

func (tb *tab) addError(s string) {
	tb.mu.Lock()
	tb.errors = append(tb.errors, s)
	tb.mu.Unlock()
}

// do runs steps, failing the test on error.
func (tb *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		tb.t.Fatalf("%s: %v", tb.name, err)
	}
}

// eval evaluates a JavaScript expression (awaiting a promise) and decodes its value.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("%s: evaluate %s: %v", tb.name, expr, err)
	}
	return v
}

// waitFor waits until a JavaScript expression is truthy, up to d.
func (tb *tab) waitFor(what, expr string, d time.Duration) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, d+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(d)
	var err error
	for {
		_, err = chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		// A navigation still under way (a Reload) destroys the page's context under the poll:
		// poll the new page instead, until the same deadline.
		if err == nil || !strings.Contains(err.Error(), "Cannot find context with specified id") || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.shot("failed-" + sanitize(what))
		tb.t.Fatalf("%s: waiting for %s: %v\nmessage: %q", tb.name, what, err, tb.text("#message"))
	}
}

// text is the visible text of the element matching a CSS selector ("" when there is none).
func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf(`document.querySelector(%q)?.innerText ?? ""`, sel))
}

// messageCode is the machine word of the message shown (the page's data-code).
func (tb *tab) messageCode() string {
	return eval[string](tb, `document.getElementById("message").dataset.code ?? ""`)
}

// pressTabUntil presses Tab until the element with the id has the focus, proving it is reachable
// by keyboard, in the page's focus order.
func (tb *tab) pressTabUntil(id string, max int) {
	tb.t.Helper()
	for range max {
		tb.do(chromedp.KeyEvent("\t"))
		if eval[string](tb, `document.activeElement?.id ?? ""`) == id {
			return
		}
	}
	tb.t.Fatalf("%s: #%s not reached with %d Tab presses", tb.name, id, max)
}

// doubleClick double-clicks the element with the id as a mouse does: press, release, press,
// release at one point, whatever the page does with the element in between.
func (tb *tab) doubleClick(id string) {
	tb.t.Helper()
	xy := eval[[]float64](tb, fmt.Sprintf(`(() => { const e = document.getElementById(%q);
		e.scrollIntoView({ block: "center" }); const r = e.getBoundingClientRect();
		return [r.left + r.width / 2, r.top + r.height / 2]; })()`, id))
	tb.do(chromedp.MouseClickXY(xy[0], xy[1]), chromedp.MouseClickXY(xy[0], xy[1], chromedp.ClickCount(2)))
}

// shot saves a screenshot of the whole page as a test artifact.
func (tb *tab) shot(name string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 15*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Logf("%s: screenshot %s: %v", tb.name, name, err)
		return
	}
	dir := artifacts(tb.t)
	p := filepath.Join(dir, sanitize(tb.t.Name())+"-"+sanitize(tb.name)+"-"+name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot: %s", p)
}

// artifacts is the folder for screenshots: $SECKILL_ARTIFACTS, or the test's temporary folder.
func artifacts(t *testing.T) string {
	if d := os.Getenv("SECKILL_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}

// shiftClock moves the page's clock (Date and Date.now) by d, as a buyer's wrong device clock
// would. performance.now, a monotonic clock, is not a wall clock and stays as it is.
func shiftClock(d time.Duration) string {
	return fmt.Sprintf(`(() => {
  const shift = %d;
  const RealDate = Date;
  const realNow = RealDate.now.bind(RealDate);
  class ShiftedDate extends RealDate {
    constructor(...args) { if (args.length === 0) { super(realNow() + shift); } else { super(...args); } }
    static now() { return realNow() + shift; }
  }
  globalThis.Date = ShiftedDate;
})();`, d.Milliseconds())
}

// recordRequests keeps every fetch of the page in window.__requests ({method, url, key, at,
// status}, at in Unix ms on the machine's real clock, which a shifted Date does not touch). Setting
// window.__dropNextBuyAnswer makes the next buy reach the gateway and its answer get lost on
// the way back, as on a dropped connection.
const recordRequests = `(() => {
  const real = window.fetch.bind(window);
  window.__requests = [];
  window.__dropNextBuyAnswer = false;
  window.fetch = async (input, init = {}) => {
    const url = typeof input === "string" ? input : input.url;
    const key = new Headers(init.headers || {}).get("Idempotency-Key");
    const entry = { method: init.method || "GET", url, key, at: performance.timeOrigin + performance.now(), status: 0 };
    window.__requests.push(entry);
    const res = await real(input, init);
    entry.status = res.status;
    if (window.__dropNextBuyAnswer && url.includes("/buy/")) {
      window.__dropNextBuyAnswer = false;
      throw new TypeError("Failed to fetch (the answer was dropped by the test)");
    }
    return res;
  };
})();`

// skewStatusesUntilBuy adds d to the server_time_ms of every status answer the page gets until it
// sends its first buy, as a lopsided network path would skew its clock samples: the page believes
// the sale's clock is d ahead (its load-time samples and its re-sample before the path instant
// agree, so neither corrects the other) until it samples again after that buy's answer. Skewing a
// fixed number of answers instead would make the test depend on whether the page had time for its
// re-sample before the path instant.
func skewStatusesUntilBuy(d time.Duration) string {
	return fmt.Sprintf(`(() => {
  const real = window.fetch.bind(window);
  let bought = false;
  window.fetch = async (input, init = {}) => {
    const url = typeof input === "string" ? input : input.url;
    if ((init.method || "GET") === "POST" && url.includes("/buy/")) {
      bought = true;
    }
    const skew = !bought && (init.method || "GET") === "GET" && /^\/seckill\/[^/]+$/.test(url);
    const res = await real(input, init);
    if (skew && res.ok) {
      const body = await res.json();
      body.server_time_ms += %d;
      return new Response(JSON.stringify(body), { status: res.status, headers: res.headers });
    }
    return res;
  };
})();`, d.Milliseconds())
}

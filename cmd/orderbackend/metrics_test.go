package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
	"github.com/caddy-seckill/caddy-seckill/payments/webhookpay"
)

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint("127.0.0.1:", port)
}

// lockedBuffer is the standard error of a run in the background: a failing test reads it while
// run may still write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startRun runs the command's run subcommand on the sale in srv with a fresh SQLite database,
// an order API and an operators' listener, and extra flags. stop ends it and fails the test
// unless it exited cleanly; runErr is its standard error.
func startRun(t *testing.T, srv *testsrv.Redis, extra ...string) (apiAddr, metricsAddr string, runErr *lockedBuffer, stop func()) {
	t.Helper()
	t.Setenv("TEST_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	apiAddr, metricsAddr = freeAddr(t), freeAddr(t)
	runCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	exited := make(chan int, 1)
	runErr = &lockedBuffer{}
	args := append([]string{"run", "-listen", apiAddr, "-metrics-listen", metricsAddr,
		"-jwt-secret-env", "TEST_JWT_SECRET", "-name", "test"}, extra...)
	args = append(args, "-redis", srv.Addr, "-db", "sqlite:"+filepath.Join(t.TempDir(), "orders.db"))
	go func() { exited <- run(runCtx, args, &bytes.Buffer{}, runErr) }()
	return apiAddr, metricsAddr, runErr, func() {
		t.Helper()
		cancel()
		if code := <-exited; code != exitOK {
			t.Fatalf("run exited %d: %s", code, runErr.String())
		}
	}
}

// TestMetricsListen runs the command with -metrics-listen: the operators' listener serves the
// order counters under the embedded backend's names, the Go runtime's metrics and pprof; the order
// API's listener serves neither; both close when the process stops.
func TestMetricsListen(t *testing.T) {
	srv, _ := saleWithWins(t, 0, "alice")
	apiAddr, metricsAddr, runErr, stop := startRun(t, srv)

	// Scrape until the win became an order: the counter the dashboards watch moves, and the
	// activity's backlog (a wins queue entry not yet acknowledged) is back to 0.
	var metrics string
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + metricsAddr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			metrics = string(b)
			if resp.StatusCode == 200 && strings.Contains(metrics, "\ncaddy_seckill_orders_created_total 1\n") &&
				strings.Contains(metrics, "\ncaddy_seckill_orders_backlog{activity=\"phone-1001\"} 0\n") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("orders_created_total never reached 1 with the backlog at 0; last scrape:\n%s\nrun: %s", metrics, runErr.String())
		}
	}
	for _, c := range orderbackend.Counters() {
		if !strings.Contains(metrics, "\n# TYPE "+c.MetricName()+" counter\n") {
			t.Errorf("/metrics lacks the counter %s", c.MetricName())
		}
	}
	for _, name := range []string{"go_goroutines", "process_start_time_seconds"} {
		if !strings.Contains(metrics, "\n"+name+" ") {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if code, body := get(t, "http://"+metricsAddr+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("GET /debug/pprof/ = %d %q", code, body)
	}
	if code, body := get(t, "http://"+metricsAddr+"/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("GET /debug/pprof/heap = %d %.100q", code, body)
	}

	// The order API faces clients: neither metrics nor profiles there.
	for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/heap"} {
		if code, body := get(t, "http://"+apiAddr+path); code == 200 || strings.Contains(body, "go_goroutines") || strings.Contains(body, "goroutine") {
			t.Errorf("order API GET %s = %d %.200q, want no metrics or profiles", path, code, body)
		}
	}

	stop()
	if c, err := net.DialTimeout("tcp", metricsAddr, time.Second); err == nil {
		_ = c.Close()
		t.Error("the metrics listener outlived the process's run")
	}
}

// TestMetricsListenNotifications runs the command with -payments webhook and -metrics-listen:
// notifications refused at the order API (unsigned, an unknown attempt, a provider that is not
// the backend's, named by the caller) are counted on the operators' listener under the embedded
// backend's names, the made-up provider as "unknown", and the received ones read 0 from the start.
func TestMetricsListenNotifications(t *testing.T) {
	srv, _ := saleWithWins(t, 0)
	const secret = "a-shop-webhook-secret-0123456789"
	t.Setenv("TEST_WEBHOOK_SECRET", secret)
	apiAddr, metricsAddr, runErr, stop := startRun(t, srv,
		"-payments", "webhook", "-webhook-url", "https://pay.shop.example/seckill", "-webhook-secret-env", "TEST_WEBHOOK_SECRET")

	post := func(path, body, signature string) int {
		req, err := http.NewRequest(http.MethodPost, "http://"+apiAddr+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if signature != "" {
			req.Header.Set(webhookpay.SignatureHeader, signature)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	event := `{"id":"evt_1","key":"no-such-order-1","outcome":"succeeded","ref":"pay_1"}`
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code := post("/orders/webhooks/webhook", event, ""); code == http.StatusBadRequest {
			break // unsigned: refused, counted once
		} else if time.Now().After(deadline) {
			t.Fatalf("the order API never answered an unsigned notification 400 (last %d); run: %s", code, runErr.String())
		}
	}
	if code := post("/orders/webhooks/webhook", event, webhookpay.Sign([]byte(secret), time.Now(), []byte(event))); code != http.StatusNotFound {
		t.Errorf("a signed notification of an unknown attempt = %d, want 404", code)
	}
	if code := post("/orders/webhooks/made-up", event, ""); code != http.StatusNotFound {
		t.Errorf("a provider that is not the backend's = %d, want 404", code)
	}

	code, metrics := get(t, "http://"+metricsAddr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		`caddy_seckill_orders_notifications_refused_total{provider="webhook",reason="bad_signature"} 1`,
		`caddy_seckill_orders_notifications_refused_total{provider="webhook",reason="unknown_payment"} 1`,
		`caddy_seckill_orders_notifications_refused_total{provider="webhook",reason="too_large"} 0`,
		`caddy_seckill_orders_notifications_refused_total{provider="unknown",reason="unknown_provider"} 1`,
		`caddy_seckill_orders_notifications_total{provider="webhook",result="stored"} 0`,
		`caddy_seckill_orders_notifications_total{provider="webhook",result="duplicate"} 0`,
		`caddy_seckill_orders_notifications_total{provider="webhook",result="ignored"} 0`,
	} {
		if !strings.Contains(metrics, "\n"+want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(metrics, "made-up") {
		t.Error("/metrics carries the caller's provider name")
	}
	stop()
}

// TestMetricsListenBad: an address the metrics listener cannot take fails start-up with a message
// that names the flag.
func TestMetricsListenBad(t *testing.T) {
	srv := testsrv.StartRedis(t)
	t.Setenv("TEST_JWT_SECRET", "0123456789abcdef0123456789abcdef")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, addr := range []string{"no-port", "127.0.0.1:99999", busy.Addr().String()} {
		// A start-up that does not fail would run until this context ends, and exit 0.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var errOut bytes.Buffer
		code := run(ctx, []string{"run", "-listen", freeAddr(t), "-metrics-listen", addr, "-jwt-secret-env", "TEST_JWT_SECRET",
			"-redis", srv.Addr, "-db", "sqlite:" + filepath.Join(t.TempDir(), "orders.db")}, &bytes.Buffer{}, &errOut)
		cancel()
		if code != exitError || !strings.Contains(errOut.String(), "-metrics-listen") {
			t.Errorf("-metrics-listen %s: exit %d, stderr %q; want %d and a message naming the flag", addr, code, errOut.String(), exitError)
		}
	}
}

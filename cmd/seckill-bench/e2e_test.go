package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// buildOnce builds a command of this module into a directory shared by the test binary's tests.
var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]string{}
)

func buildCmd(t *testing.T, name string) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available to build the gateway")
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := built[name]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "seckill-bench-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, name)
	cmd := exec.Command(gobin, "build", "-o", out, "github.com/caddy-seckill/caddy-seckill/cmd/"+name)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build cmd/%s: %v\n%s", name, err, b)
	}
	built[name] = out
	return out
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// runBench runs the whole command and returns its JSON report.
func runBench(t *testing.T, args ...string) (*Report, string) {
	t.Helper()
	dir := t.TempDir()
	jsonPath, svgPath := filepath.Join(dir, "report.json"), filepath.Join(dir, "chart.svg")
	args = append(args, "-json", jsonPath, "-svg", svgPath, "-work-dir", filepath.Join(dir, "work"), "-quiet")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := cli(ctx, args, &out, &errOut)
	text := out.String() + errOut.String()
	if code != exitOK {
		t.Fatalf("exit %d\n%s", code, text)
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(svgPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := parseSVG(t, svg)["polyline"]; n == 0 {
		t.Error("the chart has no lines")
	}
	return &r, text
}

// answers returns the seckill target's answer counts of a phase, as "call status code" → n.
func answers(t *testing.T, r *Report, phase string) map[string]int64 {
	t.Helper()
	for _, p := range r.Phases {
		if p.Name != phase {
			continue
		}
		for _, tr := range p.Targets {
			if tr.Target == "seckill" {
				m := map[string]int64{}
				for _, a := range tr.Answers {
					m[a.Call+" "+strconv.Itoa(a.Status)+" "+a.Code] += a.Count
				}
				return m
			}
		}
	}
	t.Fatalf("no seckill figures for phase %s", phase)
	return nil
}

func checkReport(t *testing.T, r *Report, text string) {
	t.Helper()
	if !r.OK {
		t.Errorf("report not OK:\n%s", text)
	}
	if len(r.Checks) != 6 {
		t.Errorf("%d invariant checks, want 6", len(r.Checks))
	}
	for _, c := range r.Checks {
		if !c.OK {
			t.Errorf("invariant %s: %s", c.Name, c.Detail)
		}
	}
	if len(r.Processes) == 0 || r.Processes[0].Name != "gateway" || r.Processes[0].PeakRSSMB <= 0 || r.Processes[0].CPUSeconds <= 0 {
		t.Errorf("no gateway process figures: %+v", r.Processes)
	}
	if len(r.Funnel) == 0 {
		t.Errorf("no gateway metrics (%s)", r.FunnelErr)
	}
	names := map[string]bool{}
	for _, x := range r.Ratios {
		names[x.Name] = x.Ratio > 0
	}
	for _, want := range []string{"sold-out path: soak req/s", "buy path: p99 of buy (ms)"} {
		if !names[want] {
			t.Errorf("no ratio %q in %v", want, r.Ratios)
		}
	}
	if s := r.Soak; s == nil || s.Presses == 0 || s.Stock == 0 || s.TimesStock != float64(s.Presses)/float64(s.Stock) {
		t.Errorf("soak figures %+v: want the presses after the sell-out against the stock", s)
	}
}

func TestEndToEndMemoryClosed(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	r, text := runBench(t, "-gateway-bin", caddy, "-scenario", "closed", "-users", "400", "-activities", "4", "-stock", "50",
		"-concurrency", "16", "-soak", "1s", "-slice", "250ms")
	checkReport(t, r, text)
	sale := answers(t, r, "sale")
	if sale["buy 202 queued"] != 200 {
		t.Errorf("%d wins, want 200 (4 × 50): %v", sale["buy 202 queued"], sale)
	}
	if sale["status 200 ok"] != 400 {
		t.Errorf("status answers %v", sale)
	}
	if sale["path 410 sold_out"]+sale["buy 410 sold_out"] != 200 {
		t.Errorf("want 200 users refused sold_out at the path or buy call: %v", sale)
	}
	if sale["result 200 queued"] != 200 {
		t.Errorf("every winner's result must show queued: %v", sale)
	}
	soak := answers(t, r, "soak")
	for k, n := range soak {
		if k != "buy 410 sold_out" {
			t.Errorf("soak answered %s ×%d: every press after the sell-out must be 410 sold_out", k, n)
		}
	}
	if soak["buy 410 sold_out"] == 0 {
		t.Error("no soak presses")
	}
}

// A burst on the memory store with the embedded order backend: reconcile goes through the admin
// API, and every winner must see its order.
func TestEndToEndMemoryBurstEmbeddedOrders(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	r, text := runBench(t, "-gateway-bin", caddy, "-scenario", "burst", "-users", "300", "-activities", "3", "-stock", "40",
		"-orders", "embedded", "-concurrency", "16", "-max-inflight", "100", "-soak", "500ms", "-slice", "250ms")
	checkReport(t, r, text)
	checkReconcile(t, r, 3, 40)
	if reveal := answers(t, r, "reveal"); reveal["path 200 ok"] != 300 {
		t.Errorf("every user must get its path before the start: %v", reveal)
	}
	burst := answers(t, r, "burst")
	if burst["buy 202 queued"] != 120 || burst["buy 410 sold_out"] != 180 {
		t.Errorf("burst answers %v, want 120 queued and 180 sold_out", burst)
	}
	if burst["result 200 pending_payment"] != 120 {
		t.Errorf("every winner must see its order: %v", burst)
	}
}

// The durable local store with the embedded order backend (Caddyfile.example's deployment): the
// sale sells exactly the stock and reconcile passes through the admin API.
func TestEndToEndLocalEmbeddedOrders(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	r, text := runBench(t, "-gateway-bin", caddy, "-store", "local", "-orders", "embedded", "-scenario", "closed",
		"-users", "200", "-activities", "2", "-stock", "30", "-concurrency", "16", "-soak", "500ms", "-slice", "250ms")
	checkReport(t, r, text)
	checkReconcile(t, r, 2, 30)
	if r.Config.Store != "local" {
		t.Errorf("report's store %q, want local", r.Config.Store)
	}
	if sale := answers(t, r, "sale"); sale["buy 202 queued"] != 60 || sale["result 200 pending_payment"] != 60 {
		t.Errorf("sale answers %v, want 60 wins, each seeing its order", sale)
	}
}

func checkReconcile(t *testing.T, r *Report, activities int, stock int64) {
	t.Helper()
	if len(r.Reconcile) != activities {
		t.Fatalf("%d reconcile reports, want %d: %s", len(r.Reconcile), activities, r.ReconcileErr)
	}
	for _, rr := range r.Reconcile {
		if !rr.OK() || rr.Orders != stock || rr.DBLeft != 0 || rr.StoreRemaining != 0 {
			t.Errorf("reconcile %s: %+v", rr.Activity, rr)
		}
	}
}

func TestEndToEndRedisWithOrderBackend(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	orders := buildCmd(t, "orderbackend")
	rd := testsrv.StartRedis(t)
	r, text := runBench(t, "-gateway-bin", caddy, "-store", "redis", "-redis-addr", rd.Addr,
		"-orders", "standalone", "-orderbackend-bin", orders,
		"-scenario", "open", "-rate", "400", "-users", "300", "-activities", "3", "-stock", "30",
		"-soak", "500ms", "-slice", "250ms")
	checkReport(t, r, text)
	checkReconcile(t, r, 3, 30)
	if sale := answers(t, r, "sale"); sale["result 200 pending_payment"] != 90 {
		t.Errorf("every winner must see its order: %v", sale)
	}
}

// TestEndToEndClusterBuckets runs the bench on a private Redis Cluster (3 masters, 3 replicas)
// with one activity split into 8 buckets: exactly the stock is won, by users within the limit.
func TestEndToEndClusterBuckets(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	cl := testsrv.StartCluster(t)
	r, text := runBench(t, "-gateway-bin", caddy, "-store", "redis", "-redis-cluster", "-redis-addr", strings.Join(cl.Addrs(), ","),
		"-buckets", "8", "-scenario", "closed", "-users", "600", "-activities", "1", "-stock", "100",
		"-concurrency", "16", "-soak", "1s", "-slice", "250ms")
	checkReport(t, r, text)
	if r.Config.Buckets != 8 || !strings.Contains(r.Title, "8 buckets") {
		t.Errorf("the report does not say the stock was split: %q %+v", r.Title, r.Config)
	}
	if sale := answers(t, r, "sale"); sale["buy 202 queued"] != 100 {
		t.Errorf("%d wins, want the stock of 100: %v", sale["buy 202 queued"], sale)
	}
}

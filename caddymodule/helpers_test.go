package caddymodule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/caddymodule"
	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
)

// The helpers these tests share with seckillcmd's (internal/testcaddy: starting Caddy in this
// process or as the built cmd/caddy, the Caddyfile of a test sale, tokens, the HTTP client, the
// admin API), under the short names they use here.
type (
	client   = testcaddy.Client
	response = testcaddy.Response
	sale     = testcaddy.Sale
)

const (
	jwtBlock   = testcaddy.JWTBlock
	route      = testcaddy.Route
	ordersSite = testcaddy.OrdersSite
	payWindow  = testcaddy.PayWindow
)

var (
	jwtSecret       = testcaddy.JWTSecret
	rfc3339         = testcaddy.RFC3339
	activityBlock   = testcaddy.ActivityBlock
	saleBlock       = testcaddy.SaleBlock
	ordersOption    = testcaddy.OrdersOption
	token           = testcaddy.Token
	signToken       = testcaddy.SignToken
	ecKeyFile       = testcaddy.ECKeyFile
	eventually      = testcaddy.Eventually
	metricValue     = testcaddy.MetricValue
	newClient       = testcaddy.NewClient
	expect          = testcaddy.Expect
	buyPath         = testcaddy.BuyPath
	freePort        = testcaddy.FreePort
	adapt           = testcaddy.Adapt
	loadCaddyfile   = testcaddy.LoadCaddyfile
	runCaddyfile    = testcaddy.RunCaddyfile
	caddyfile       = testcaddy.Caddyfile
	startCaddy      = testcaddy.StartCaddy
	startCaddyAdmin = testcaddy.StartCaddyAdmin
	loadCaddy       = testcaddy.LoadCaddy
	loadCaddyfileOn = testcaddy.LoadCaddyfileOn
	startSale       = testcaddy.StartSale
	buildCaddy      = testcaddy.BuildCaddy
)

// TestMain removes the cmd/caddy that buildCaddy built.
func TestMain(m *testing.M) { testcaddy.Main(m) }

// app returns the running seckill app.
func app(t testing.TB) *caddymodule.App {
	t.Helper()
	v, err := caddy.ActiveContext().App("seckill")
	if err != nil {
		t.Fatal(err)
	}
	return v.(*caddymodule.App)
}

// remaining reads the stock left straight from the store, bypassing every cache.
func remaining(t *testing.T, activity string) int64 {
	t.Helper()
	n, err := app(t).Guard().Store().Remaining(context.Background(), activity)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// bucketsBlock is the Caddyfile block of an open activity (limit 1) whose stock is split into
// buckets.
func bucketsBlock(id string, stock, buckets int) string {
	now := time.Now()
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tstart %s\n\tend %s\n\tbuckets %d\n}\n",
		id, stock, rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), buckets)
}

// adminCaller returns a function that calls the admin endpoint at admin (http://host:port) with a
// JSON body and returns the status and body.
func adminCaller(t testing.TB, admin string) func(method, path, body string) (int, string) {
	return func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, admin+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
}

// logEntries returns the JSON entries of Caddy's log file whose message begins with msg, and the
// whole log for failure messages. A warning logged at the app's start is in the file once
// caddy.Load has returned.
func logEntries(t testing.TB, file, msg string) ([]map[string]any, string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var e map[string]any
		if line == "" || json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		if m, _ := e["msg"].(string); strings.HasPrefix(m, msg) {
			out = append(out, e)
		}
	}
	return out, string(b)
}

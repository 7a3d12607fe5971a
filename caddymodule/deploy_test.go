package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// The monitoring files of deploy/ (docs/OPERATIONS.md), relative to this package.
const (
	alertRules    = "../deploy/prometheus/alerts.yml"
	alertTests    = "../deploy/prometheus/alerts_test.yml"
	dashboardJSON = "../deploy/grafana/caddy-seckill.json"
)

// TestAlertRules checks the alert rules with promtool and runs their unit tests.
func TestAlertRules(t *testing.T) {
	promtool := testsrv.PrometheusTool(t, "promtool")
	if out, err := exec.Command(promtool, "check", "rules", alertRules).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(promtool, "test", "rules", filepath.Base(alertTests))
	cmd.Dir = filepath.Dir(alertTests)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	Type    string           `json:"type"`
	Title   string           `json:"title"`
	Panels  []dashboardPanel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// readDashboard returns the dashboard's panels (a collapsed row's included) and variables.
func readDashboard(t *testing.T) ([]dashboardPanel, map[string]string) {
	t.Helper()
	b, err := os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardJSON, err)
	}
	var panels []dashboardPanel
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			panels = append(panels, p)
		}
	}
	walk(d.Panels)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Definition
	}
	return panels, vars
}

// TestDashboardQueries runs a short sale with the embedded order backend while a private
// Prometheus scrapes the gateway every second, then evaluates every panel's query of the Grafana
// dashboard (and its activity variable) against it: each must return series, so a renamed metric
// fails here and not on a dashboard during a sale.
func TestDashboardQueries(t *testing.T) {
	panels, vars := readDashboard(t)
	if len(panels) < 12 {
		t.Fatalf("%d panels in %s", len(panels), dashboardJSON)
	}
	s := startSale(t, jwtBlock+"captcha off\n"+saleBlock("dash", 6)+ordersOption("sqlite "+filepath.Join(t.TempDir(), "orders.db")))
	u, err := url.Parse(s.Client.Base)
	if err != nil {
		t.Fatal(err)
	}
	prom := testsrv.StartPrometheus(t, time.Second, "/metrics", u.Host)

	// The sale: 9 buyers for 6 items, two winners pay, one cancels, a forged buy path and a
	// missing token are refused at their layers.
	c := s.Client
	var winners, toks, paths []string
	for i := range 9 {
		tok := token(t, fmt.Sprintf("buyer%d", i))
		toks, paths = append(toks, tok), append(paths, buyPath(t, c, "dash", tok))
	}
	expect(t, "forged path", c.Post("/seckill/dash/buy/0123456789abcdef", toks[0], ""), http.StatusNotFound, "bad_path")
	expect(t, "no token", c.Post("/seckill/dash/path", "", ""), http.StatusUnauthorized, "unauthorized")
	for i, tok := range toks {
		r := c.Post(paths[i], tok, "")
		switch r.Status {
		case http.StatusAccepted:
			winners = append(winners, tok)
		case http.StatusGone:
		default:
			t.Fatalf("buy %d: %s", i, r)
		}
	}
	if len(winners) != 6 {
		t.Fatalf("%d winners of 6 items", len(winners))
	}
	for i, tok := range winners[:3] {
		order := waitResult(t, c, "dash", tok, "pending_payment").Str("order_id")
		action, want := "pay", "paid"
		if i == 2 {
			action, want = "cancel", "cancelled"
		}
		expect(t, action, c.Post("/orders/"+order+"/"+action, tok, ""), http.StatusOK, want)
	}
	for _, tok := range winners[3:] {
		waitResult(t, c, "dash", tok, "pending_payment")
	}
	// The cancelled item went back and is sold again: the sale ends sold out.
	last := token(t, "late-buyer")
	eventually(t, "the released item sold again", func() (bool, string) {
		r := c.Post("/seckill/dash/path", last, "")
		if r.Status != http.StatusOK {
			return false, r.String()
		}
		r = c.Post(r.Str("path"), last, "")
		return r.Status == http.StatusAccepted, r.String()
	})
	waitResult(t, c, "dash", last, "pending_payment")
	if ok, body := s.ReconcileOK(t); !ok {
		t.Fatalf("reconcile: %s", body)
	}
	// An admin read brings the node's view of the store's counters (wins, dead letters) up to
	// date now rather than at the next refresh.
	if status, body := s.AdminCall(t, http.MethodGet, "/seckill/activities/dash", ""); status != http.StatusOK {
		t.Fatalf("admin API: %d %s", status, body)
	}

	// Prometheus has the sale once it has scraped the paid orders, the reconcile run, and the
	// node's refresh of the store's counters (every 5 s).
	eventually(t, "prometheus scraped the sale", func() (bool, string) {
		for _, q := range []string{
			`caddy_seckill_orders_paid_total >= 2`,
			`caddy_seckill_reconcile_runs_total{result="ok"} >= 1`,
			`caddy_seckill_wins{activity="dash"} >= 7`,
			`caddy_seckill_orders_backlog{activity="dash"} == 0`,
		} {
			if res, err := prom.Query(q); err != nil || len(res) == 0 {
				return false, fmt.Sprintf("%s: %v %v", q, res, err)
			}
		}
		return true, ""
	})
	time.Sleep(3 * time.Second) // a few more scrapes, so that rates see two samples after the sale

	subst := strings.NewReplacer(`$activity`, "dash", `$__rate_interval`, "30s", `$__range`, "5m")
	for _, p := range panels {
		if isBucketPanel(p) {
			continue // store memory has no buckets: TestDashboardBucketPanels
		}
		if isRoomPanel(p) {
			continue // this sale has no waiting room: TestDashboardRoomPanels
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		checkPanelSeries(t, prom, p, subst)
	}

	// The activity variable lists the activity.
	def := vars["activity"]
	metric, ok := strings.CutPrefix(def, "label_values(")
	metric, _, _ = strings.Cut(metric, ",")
	if !ok || metric == "" {
		t.Fatalf("activity variable: %q", def)
	}
	if res, err := prom.Query(fmt.Sprintf(`count by (activity) (%s{activity="dash"})`, metric)); err != nil || len(res) != 1 {
		t.Errorf("activity variable %s: %v %v", def, res, err)
	}

	// A few panels against what the sale did.
	for q, want := range map[string]float64{
		`min by (activity) (caddy_seckill_remaining{activity="dash"})`:    0,
		`max by (activity) (caddy_seckill_dead_letters{activity="dash"})`: 0,
		`max by (activity) (caddy_seckill_wins{activity="dash"})`:         7,
		`sum(caddy_seckill_orders_paid_total)`:                            2,
		`sum(caddy_seckill_orders_cancelled_total)`:                       1,
		`sum(caddy_seckill_rejected_total{layer="hashed_url"})`:           1,
		`sum(caddy_seckill_rejected_total{layer="jwt"})`:                  1,
	} {
		res, err := prom.Query(q)
		if err != nil || len(res) != 1 || res[0].Float() != want {
			t.Errorf("%s = %v (%v), want %v", q, res, err, want)
		}
	}
	res, err := prom.Query(`min by (activity) (caddy_seckill_sold_out_timestamp_seconds{activity="dash"} > 0) - max by (activity) (caddy_seckill_start_timestamp_seconds{activity="dash"})`)
	if err != nil || len(res) != 1 || res[0].Float() < 50 || res[0].Float() > 600 {
		t.Errorf("sold out after (the window opened a minute before the test): %v %v", res, err)
	}
}

// bucketMetricPrefix starts the metrics of the stock buckets (store redis only).
const bucketMetricPrefix = "caddy_seckill_bucket_"

// isBucketPanel reports whether a panel shows the stock buckets, whose metrics only store redis
// exports.
// checkPanelSeries runs each of p's queries, its template variables replaced by subst, against
// prom and fails the test for an unknown variable, an error or a query with no series.
func checkPanelSeries(t *testing.T, prom *testsrv.Prometheus, p dashboardPanel, subst *strings.Replacer) {
	t.Helper()
	for _, tg := range p.Targets {
		expr := subst.Replace(tg.Expr)
		if strings.Contains(expr, "$") {
			t.Errorf("panel %q: a template variable the test does not know: %s", p.Title, tg.Expr)
			continue
		}
		if res, err := prom.Query(expr); err != nil || len(res) == 0 {
			t.Errorf("panel %q: no series for %s: %v %v", p.Title, expr, res, err)
		}
	}
}

// roomMetricPrefix starts the metrics of the waiting rooms (activities with a waiting_room only).
const roomMetricPrefix = "caddy_seckill_waiting_room_"

// isRoomPanel reports whether a panel shows the waiting rooms.
func isRoomPanel(p dashboardPanel) bool {
	for _, tg := range p.Targets {
		if strings.Contains(tg.Expr, roomMetricPrefix) {
			return true
		}
	}
	return false
}

// TestDashboardRoomPanels runs a sale with a waiting room (admit 2/s, sessions of a second) while
// a private Prometheus scrapes the gateway: buyers join (one of them twice, one refused for a
// missing proof of work in another room), are admitted and let their sessions end; then every
// query of the waiting room's panels must return series.
func TestDashboardRoomPanels(t *testing.T) {
	panels, _ := readDashboard(t)
	var roomPanels []dashboardPanel
	for _, p := range panels {
		if isRoomPanel(p) {
			roomPanels = append(roomPanels, p)
		}
	}
	if len(roomPanels) < 4 {
		t.Fatalf("%d waiting room panels in %s, want the line, admitted/s, sessions ended/s and joins", len(roomPanels), dashboardJSON)
	}
	now := time.Now()
	base := startCaddy(t, jwtBlock+"captcha off\n"+
		roomBlock("dashr", 50, now.Add(-time.Minute), now.Add(time.Hour), "admit 2/s\nsession 1s")+
		roomBlock("dashp", 50, now.Add(-time.Minute), now.Add(time.Hour), "proof_of_work 4"), route+"metrics /metrics\n")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	prom := testsrv.StartPrometheus(t, time.Second, "/metrics", u.Host)
	c := newClient(t, base)
	for i := range 8 {
		expect(t, "join", c.Post("/seckill/dashr/queue", token(t, fmt.Sprint("r", i)), ""), http.StatusOK, "ok")
	}
	expect(t, "join again", c.Post("/seckill/dashr/queue", token(t, "r0"), ""), http.StatusOK, "ok")
	expect(t, "join without a proof", c.Post("/seckill/dashp/queue", token(t, "p0"), ""), http.StatusForbidden, "pow_required")
	eventually(t, "prometheus saw the line move", func() (bool, string) {
		for _, q := range []string{
			`caddy_seckill_waiting_room_admitted{activity="dashr"} >= 8`,
			`caddy_seckill_waiting_room_sessions_ended{activity="dashr"} >= 8`,
		} {
			if res, err := prom.Query(q); err != nil || len(res) == 0 {
				return false, fmt.Sprintf("%s: %v %v", q, res, err)
			}
		}
		return true, ""
	})
	time.Sleep(3 * time.Second) // rates need two samples
	subst := strings.NewReplacer(`$activity`, "dashr|dashp", `$__rate_interval`, "30s")
	for _, p := range roomPanels {
		checkPanelSeries(t, prom, p, subst)
	}
	for q, want := range map[string]float64{
		`max by (activity) (caddy_seckill_waiting_room_length{activity="dashr"})`:                                                                             8,
		`sum(caddy_seckill_waiting_room_joins_total{activity="dashr",result="joined"})`:                                                                       8,
		`sum(caddy_seckill_waiting_room_joins_total{activity="dashp",result="pow_required"})`:                                                                 1,
		`max by (activity) (caddy_seckill_waiting_room_length{activity="dashr"}) - max by (activity) (caddy_seckill_waiting_room_admitted{activity="dashr"})`: 0,
	} {
		res, err := prom.Query(q)
		if err != nil || len(res) != 1 || res[0].Float() != want {
			t.Errorf("%s = %v (%v), want %v", q, res, err, want)
		}
	}
}

func isBucketPanel(p dashboardPanel) bool {
	for _, tg := range p.Targets {
		if strings.Contains(tg.Expr, bucketMetricPrefix) {
			return true
		}
	}
	return false
}

// TestDashboardBucketPanels sells an activity split into 8 buckets on a private Redis, to buyers
// all at home in one bucket so that stock is pulled, while a private Prometheus scrapes the
// gateway; then every query of the bucket panels must return series, with one stock series per
// bucket. And every metric the dashboard and the alert rules name must be one this gateway (store
// redis, buckets, the embedded order backend) or one with store local exports: a renamed metric
// fails here.
func TestDashboardBucketPanels(t *testing.T) {
	panels, _ := readDashboard(t)
	var bucketPanels []dashboardPanel
	for _, p := range panels {
		if isBucketPanel(p) {
			bucketPanels = append(bucketPanels, p)
		}
	}
	if len(bucketPanels) < 2 {
		t.Fatalf("%d bucket panels in %s, want the stock and the transfers", len(bucketPanels), dashboardJSON)
	}
	srv := testsrv.StartRedis(t)
	now := time.Now()
	s := startSale(t, jwtBlock+"captcha off\nurl_secret u\nstore redis "+srv.Addr+"\n"+
		ordersOption("sqlite "+filepath.Join(t.TempDir(), "orders.db"))+bucketSale("dashb", 40, 1, 8)+
		roomBlock("dashr", 5, now.Add(-time.Minute), now.Add(time.Hour), ""))
	u, err := url.Parse(s.Client.Base)
	if err != nil {
		t.Fatal(err)
	}
	prom := testsrv.StartPrometheus(t, time.Second, "/metrics", u.Host)
	var users []string
	for i := 0; len(users) < 50; i++ {
		if name := fmt.Sprintf("dashb-%d", i); admission.HomeBucket(name, 8) == 3 {
			users = append(users, name)
		}
	}
	wins := bucketRush(t, s.Client, "dashb", users, 1)
	if n := len(wins); n != 40 {
		t.Fatalf("%d winners of 40 items", n)
	}
	eventually(t, "prometheus scraped the pulls", func() (bool, string) {
		for _, q := range []string{
			`caddy_seckill_bucket_dry_pulls_total > 0`,
			`count(caddy_seckill_bucket_stock{activity="dashb"}) == 8`,
		} {
			if res, err := prom.Query(q); err != nil || len(res) == 0 {
				return false, fmt.Sprintf("%s: %v %v", q, res, err)
			}
		}
		return true, ""
	})
	time.Sleep(3 * time.Second) // rates need two samples after the sale
	subst := strings.NewReplacer(`$activity`, "dashb", `$__rate_interval`, "30s")
	for _, p := range bucketPanels {
		checkPanelSeries(t, prom, p, subst)
	}
	if res, err := prom.Query(`max by (activity, bucket) (caddy_seckill_bucket_stock{activity="dashb"})`); err != nil || len(res) != 8 {
		t.Errorf("stock per bucket: %v %v, want 8 series", res, err)
	}

	// Every metric the dashboard and the alert rules name is exported: by this gateway, or by one
	// with store local (its commit and checkpoint counters), loaded next in its place.
	exported := map[string]bool{}
	addExported := func(c *client) {
		for _, line := range strings.Split(string(c.Get("/metrics", "").Raw), "\n") {
			if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
				name, _, _ := strings.Cut(rest, " ")
				exported[name] = true
			}
		}
	}
	// A join, so that the waiting room's join counter has a series.
	expect(t, "join dashr", s.Client.Post("/seckill/dashr/queue", token(t, "joiner"), ""), http.StatusOK, "ok")
	addExported(s.Client)
	addExported(startSale(t, jwtBlock+"captcha off\nurl_secret u\nstore local "+t.TempDir()+"\n"+
		ordersOption("sqlite "+filepath.Join(t.TempDir(), "orders-local.db"))+saleBlock("dashl", 5)).Client)
	rules, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, p := range panels {
		for _, tg := range p.Targets {
			texts = append(texts, tg.Expr)
		}
	}
	for _, line := range strings.Split(string(rules), "\n") {
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, "#") && !strings.HasPrefix(trimmed, "runbook:") && !strings.HasPrefix(trimmed, "description:") {
			texts = append(texts, line) // expressions and summaries, not the prose naming other metrics
		}
	}
	name := regexp.MustCompile(`caddy_seckill_[a-z0-9_]+`)
	for _, text := range texts {
		for _, m := range name.FindAllString(text, -1) {
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && exported[b] {
					base = b
				}
			}
			if !exported[base] {
				t.Errorf("%s is named by the dashboard or the alert rules but not exported", m)
			}
		}
	}
}

// TestDashboardLayout checks what Grafana needs of the dashboard without a Grafana: the four rows
// of the issue in order, the stock buckets' row and the waiting room's, unique panel ids and titles, every panel on the 24-column grid and on the
// datasource variable, and the activity variable (multi-select, with All).
func TestDashboardLayout(t *testing.T) {
	b, err := os.ReadFile(dashboardJSON)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Multi      bool   `json:"multi"`
				IncludeAll bool   `json:"includeAll"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" {
		t.Error("no uid: an import would make a new dashboard each time")
	}
	var rows []string
	ids, titles := map[int]bool{}, map[string]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] || titles[p.Title] {
			t.Errorf("panel %d %q: id or title repeated", p.ID, p.Title)
		}
		ids[p.ID], titles[p.Title] = true, true
		if g := p.GridPos; g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: off the grid: %+v", p.Title, g)
		}
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: not on the datasource variable", p.Title)
		}
	}
	if got, want := strings.Join(rows, ","), "Sale,Funnel,Health,Orders,Stock buckets,Waiting room"; got != want {
		t.Errorf("rows %s, want %s", got, want)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Name == "activity" && (v.Type != "query" || !v.Multi || !v.IncludeAll) {
			t.Errorf("activity variable: %+v", v)
		}
	}
	if !vars["activity"] || !vars["datasource"] {
		t.Errorf("variables %v, want activity and datasource", vars)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// check is one invariant as the bench checked it.
type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// storeView is what the gateway says an activity holds after the run.
type storeView struct {
	Remaining int64
	Sold      int64 // -1: unknown (status call only)
	Buyers    int64
	Wins      int64
	FromAdmin bool
}

// checkInvariants checks the four promises (README.md) that the bench can see from outside:
//
//   - winners ≤ stock per activity, and no user holds more than the limit (sale and soak 202s);
//   - every 202 carries a reservation id, distinct within its activity;
//   - the gateway's store agrees with the answers: remaining = stock − wins, with a slack only for
//     buys whose answer was lost; with the admin API also sold, buyers and the wins queue;
//   - an activity whose every user got a definite answer is sold out if demand ≥ stock (no
//     undersell at the edge);
//   - every win shows in the result call (queued, or its order with an order backend).
func (b *bench) checkInvariants(ctx context.Context) []check {
	views, src, err := b.storeViews(ctx)
	return evaluate(&b.cfg, b.users, b.orders, views, src, err)
}

// evaluate checks the users' outcomes against each other, the configuration and the store's view.
func evaluate(cfg *config, us *users, orders bool, views map[string]storeView, src string, viewErr error) []check {
	na := len(us.acts)
	wins := make([]int64, na)
	unknown := make([]int64, na)
	gaveUp := make([]int64, na)
	demand := make([]int64, na)
	seen := make([]map[string]int, na)
	for a := range seen {
		seen[a] = map[string]int{}
	}
	var missingID, dupIDs, overLimit, unconfirmed int64
	var dupSample, limitSample, confirmSample []string
	sample := func(list *[]string, s string) {
		if len(*list) < 5 {
			*list = append(*list, s)
		}
	}
	addWin := func(u, a int, id string) {
		wins[a]++
		if id == "" {
			missingID++
			return
		}
		if prev, ok := seen[a][id]; ok {
			dupIDs++
			sample(&dupSample, fmt.Sprintf("%s: %s for %s and %s", us.acts[a], id, userID(prev), userID(u)))
			return
		}
		seen[a][id] = u
	}
	for u := 0; u < us.n; u++ {
		a := us.activityOf(u)
		demand[a]++
		held := int64(0)
		switch us.outcome[u] {
		case outcomeWon:
			addWin(u, a, us.reservation[u])
			held++
			if !us.confirmed[u] {
				unconfirmed++
				sample(&confirmSample, userID(u)+" "+us.reservation[u])
			}
		case outcomeUnknown:
			unknown[a]++
		case outcomeGaveUp, outcomeNone:
			gaveUp[a]++
		}
		for _, id := range us.extraWins[u] {
			addWin(u, a, id)
			held++
		}
		if held > cfg.limit {
			overLimit++
			sample(&limitSample, fmt.Sprintf("%s holds %d in %s", userID(u), held, us.acts[a]))
		}
	}

	var checks []check
	var detail string
	add := func(name string, ok bool, detail string) { checks = append(checks, check{name, ok, detail}) }

	var over []string
	var totalWins int64
	for a, n := range wins {
		totalWins += n
		if n > cfg.stock {
			over = append(over, fmt.Sprintf("%s sold %d of %d", us.acts[a], n, cfg.stock))
		}
	}
	add("winners ≤ stock per activity", len(over) == 0,
		orDefault(strings.Join(over, "; "), fmt.Sprintf("%d winners for %d items", totalWins, cfg.stock*int64(na))))
	detail = fmt.Sprintf("limit %d", cfg.limit)
	if overLimit > 0 {
		detail = fmt.Sprintf("%d users: %s", overLimit, strings.Join(limitSample, "; "))
	}
	add("no user above the limit", overLimit == 0, detail)
	extra := 0
	for _, l := range us.extraWins {
		extra += len(l)
	}
	detail = fmt.Sprintf("%d reservations, all distinct; %d 202s during the soak", totalWins, extra)
	if dupIDs > 0 || missingID > 0 {
		detail = fmt.Sprintf("%d reservations, %d duplicates (%s), %d without an id", totalWins, dupIDs, strings.Join(dupSample, "; "), missingID)
	}
	add("every 202 reservation distinct", dupIDs == 0 && missingID == 0, detail)

	if viewErr != nil {
		add("store agrees with the answers", false, viewErr.Error())
	} else {
		var bad, undersold []string
		for a, id := range us.acts {
			v := views[id]
			sold := cfg.stock - v.Remaining
			if sold < wins[a] || sold > wins[a]+unknown[a] {
				bad = append(bad, fmt.Sprintf("%s: %d sold by the store, %d wins answered (+%d unknown)", id, sold, wins[a], unknown[a]))
			}
			if v.FromAdmin && (v.Sold != sold || v.Wins < wins[a] || v.Wins > wins[a]+unknown[a]) {
				bad = append(bad, fmt.Sprintf("%s: admin says sold %d, wins %d, remaining %d; %d wins answered", id, v.Sold, v.Wins, v.Remaining, wins[a]))
			}
			if gaveUp[a] == 0 && unknown[a] == 0 && demand[a] >= cfg.stock && v.Remaining > 0 {
				undersold = append(undersold, fmt.Sprintf("%s: %d users all answered, %d items left", id, demand[a], v.Remaining))
			}
		}
		add("store agrees with the answers ("+src+")", len(bad) == 0, orDefault(strings.Join(bad, "; "), "remaining = stock − wins for every activity"))
		var gave int64
		for _, g := range gaveUp {
			gave += g
		}
		detail = "every activity with demand ≥ stock sold out"
		if gave > 0 {
			detail += fmt.Sprintf(" (not checked where users gave up: %d users)", gave)
		}
		add("no undersell at the edge", len(undersold) == 0, orDefault(strings.Join(undersold, "; "), detail))
	}
	want := "queued with its reservation"
	if orders {
		want = "an order (pending_payment) with its reservation"
	}
	detail = fmt.Sprintf("%d wins, each %s", totalWins, want)
	if unconfirmed > 0 {
		detail = fmt.Sprintf("%d wins never showed as %s within %s: %s", unconfirmed, want, cfg.pollTimeout, strings.Join(confirmSample, "; "))
	}
	add("every win shows in /result", unconfirmed == 0, detail)
	return checks
}

// orDefault returns problem, or fine when there is no problem.
func orDefault(problem, fine string) string {
	if problem == "" {
		return fine
	}
	return problem
}

// storeViews reads what the gateway holds for each activity: from the admin API when there is
// one (the store's own counters), else from the status call (remaining only, up to 1 s old).
func (b *bench) storeViews(ctx context.Context) (map[string]storeView, string, error) {
	if b.env.admin != "" {
		if v, err := b.adminViews(ctx); err == nil {
			return v, "admin API", nil
		}
	}
	// The status call's remaining may be a second old; wait so that it reflects the whole run.
	sleep(ctx, 1100*time.Millisecond)
	out := map[string]storeView{}
	for _, id := range b.users.acts {
		a := b.cl.do(ctx, request{method: http.MethodGet, path: b.cfg.prefix + "/" + id, user: -1})
		if a.Status != http.StatusOK {
			return nil, "", statusError("status of "+id+" after the run", a)
		}
		out[id] = storeView{Remaining: a.Remaining, Sold: -1}
	}
	return out, "status call", nil
}

func (b *bench) adminViews(ctx context.Context) (map[string]storeView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.env.admin+"/seckill/activities", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin API: HTTP %d", resp.StatusCode)
	}
	var list []struct {
		ID        string `json:"id"`
		Remaining int64  `json:"remaining"`
		Sold      int64  `json:"sold"`
		Buyers    int64  `json:"buyers"`
		Wins      int64  `json:"wins"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("admin API: %w", err)
	}
	out := map[string]storeView{}
	for _, a := range list {
		out[a.ID] = storeView{Remaining: a.Remaining, Sold: a.Sold, Buyers: a.Buyers, Wins: a.Wins, FromAdmin: true}
	}
	for _, id := range b.users.acts {
		if _, ok := out[id]; !ok {
			return nil, fmt.Errorf("admin API does not list %s", id)
		}
	}
	return out, nil
}

// reconcileTimeout bounds the wait for the order queue to drain before reconcile passes.
const reconcileTimeout = 30 * time.Second

// reconcile runs the order backend's Reconcile for every activity, once the queue has drained:
// it retries for up to 30 s while anything fails (work still in flight shows as a violation).
// An embedded order backend is asked through the gateway's admin API; a standalone one is
// checked here, against its Redis store and database.
func (b *bench) reconcile(ctx context.Context) ([]orderbackend.Report, error) {
	if b.env.embedded {
		return b.reconcileViaAdmin(ctx)
	}
	if b.env.ordersDB == "" || b.env.redisAddr == "" {
		return nil, nil
	}
	kind, dsn := "postgres", b.env.ordersDB
	if s, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		kind, dsn = "sqlite", s
	}
	client := redis.NewClient(&redis.Options{Addr: b.env.redisAddr})
	store, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	defer func() { _ = store.Close() }()
	repo, err := orderbackend.OpenRepository(ctx, kind, dsn)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	defer func() { _ = repo.Close() }()

	deadline := time.Now().Add(reconcileTimeout)
	for {
		var reports []orderbackend.Report
		allOK := true
		for _, id := range b.users.acts {
			r, err := orderbackend.Reconcile(ctx, store, repo, id)
			if err != nil {
				return nil, err
			}
			allOK = allOK && r.OK()
			reports = append(reports, r)
		}
		if allOK || time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			return reports, nil
		}
	}
}

// reconcileViaAdmin asks the gateway's admin API (GET /seckill/reconcile) until every activity
// passes or the wait is over.
func (b *bench) reconcileViaAdmin(ctx context.Context) ([]orderbackend.Report, error) {
	if b.env.admin == "" {
		return nil, fmt.Errorf("reconcile: the embedded order backend is asked through the admin API: give -admin")
	}
	deadline := time.Now().Add(reconcileTimeout)
	for {
		var ans struct {
			OK      bool                  `json:"ok"`
			Reports []orderbackend.Report `json:"reports"`
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.env.admin+"/seckill/reconcile", nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("reconcile through the admin API: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("reconcile through the admin API: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("reconcile through the admin API: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		if err := json.Unmarshal(body, &ans); err != nil {
			return nil, fmt.Errorf("reconcile through the admin API: %w", err)
		}
		// Only the bench's activities: the store may hold others.
		var reports []orderbackend.Report
		ok := true
		for _, r := range ans.Reports {
			if slices.Contains(b.users.acts, r.Activity) {
				reports = append(reports, r)
				ok = ok && r.OK()
			}
		}
		if len(reports) != len(b.users.acts) {
			return reports, fmt.Errorf("reconcile through the admin API: %d of the bench's %d activities reported", len(reports), len(b.users.acts))
		}
		if ok || time.Now().After(deadline) || !sleep(ctx, 500*time.Millisecond) {
			return reports, nil
		}
	}
}

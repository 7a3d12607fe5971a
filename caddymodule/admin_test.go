package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminAPI manages activities through Caddy's admin endpoint.
func TestAdminAPI(t *testing.T) {
	now := time.Now()
	base, adminAddr := startCaddyAdmin(t,
		jwtBlock+"captcha off\n"+activityBlock("adm", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	admin := "http://" + adminAddr
	c := newClient(t, base)

	call := adminCaller(t, admin)

	alice := token(t, "alice")
	win := c.Post(buyPath(t, c, "adm", alice), alice, "")
	expect(t, "buy", win, http.StatusAccepted, "queued")

	status, body := call(http.MethodGet, "/seckill/activities/adm", "")
	var a map[string]any
	if status != http.StatusOK || json.Unmarshal([]byte(body), &a) != nil {
		t.Fatalf("get: %d %s", status, body)
	}
	if a["remaining"] != 2.0 || a["sold"] != 1.0 || a["buyers"] != 1.0 || a["stock"] != 3.0 || a["wins"] != 1.0 {
		t.Errorf("get: %s", body)
	}
	if strings.Contains(body, "salt") {
		t.Errorf("the admin API shows the salt: %s", body)
	}

	// Redefining a running sale needs force; with it, the remaining stock follows the new total.
	def := fmt.Sprintf(`{"stock":10,"limit":1,"start":%q,"end":%q,"pay_within":"10m"}`,
		rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)))
	if status, body := call(http.MethodPut, "/seckill/activities/adm", def); status != http.StatusConflict || !strings.Contains(body, "force") {
		t.Errorf("unforced redefinition: %d %s", status, body)
	}
	if status, body := call(http.MethodPut, "/seckill/activities/adm?force=1", def); status != http.StatusOK || !strings.Contains(body, `"remaining":9`) {
		t.Errorf("forced redefinition: %d %s", status, body)
	}
	if n := remaining(t, "adm"); n != 9 {
		t.Errorf("remaining %d after redefinition, want 9", n)
	}

	// A new activity is served at once, on this node.
	if status, body := call(http.MethodPut, "/seckill/activities/fresh", def); status != http.StatusOK {
		t.Fatalf("create: %d %s", status, body)
	}
	expect(t, "new activity", c.Get("/seckill/fresh", ""), http.StatusOK, "ok")

	// Release gives the reservation back once.
	rel := fmt.Sprintf(`{"reservation_id":%q}`, win.Str("reservation_id"))
	if status, body := call(http.MethodPost, "/seckill/activities/adm/release", rel); status != http.StatusOK || !strings.Contains(body, `"released":true`) {
		t.Errorf("release: %d %s", status, body)
	}
	if status, body := call(http.MethodPost, "/seckill/activities/adm/release", rel); status != http.StatusOK || !strings.Contains(body, `"released":false`) {
		t.Errorf("second release: %d %s", status, body)
	}
	if n := remaining(t, "adm"); n != 10 {
		t.Errorf("remaining %d after release, want 10", n)
	}

	status, body = call(http.MethodGet, "/seckill/stats", "")
	if status != http.StatusOK || !strings.Contains(body, `"breaker":"closed"`) || !strings.Contains(body, `"id":"fresh"`) {
		t.Errorf("stats: %d %s", status, body)
	}
	if status, _ := call(http.MethodGet, "/seckill/activities", ""); status != http.StatusOK {
		t.Errorf("list: %d", status)
	}

	// Bad requests.
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{http.MethodGet, "/seckill/activities/nope", "", http.StatusNotFound},
		{http.MethodPut, "/seckill/activities/x", "{", http.StatusBadRequest},
		{http.MethodPut, "/seckill/activities/x", `{"stock":1,"start":"2026-01-02T00:00:00Z","end":"2026-01-01T00:00:00Z"}`, http.StatusBadRequest},
		{http.MethodPost, "/seckill/activities/adm/release", `{}`, http.StatusBadRequest},
		{http.MethodPost, "/seckill/activities/adm/release", `{"reservation_id":"nope"}`, http.StatusNotFound},
		{http.MethodPost, "/seckill/stats", "", http.StatusMethodNotAllowed},
		{http.MethodGet, "/seckill/nothing", "", http.StatusNotFound},
		{http.MethodGet, "/seckill/activities/adm/archive", "", http.StatusMethodNotAllowed},
		{http.MethodPost, "/seckill/activities/adm/archive?batch=0", "", http.StatusBadRequest},
		{http.MethodPost, "/seckill/activities/adm/archive", "", http.StatusConflict}, // no orders in this sale
		{http.MethodDelete, "/seckill/activities/adm", "", http.StatusConflict},
	} {
		if status, body := call(tc.method, tc.path, tc.body); status != tc.status {
			t.Errorf("%s %s %s: %d %s; want %d", tc.method, tc.path, tc.body, status, body, tc.status)
		}
	}

	if status, body := call(http.MethodDelete, "/seckill/activities/adm?force=1", ""); status != http.StatusNoContent {
		t.Errorf("forced delete: %d %s", status, body)
	}
	expect(t, "deleted activity", c.Get("/seckill/adm", ""), http.StatusNotFound, "not_found")
}

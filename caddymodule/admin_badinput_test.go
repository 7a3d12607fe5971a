package caddymodule_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// TestAdminPutRefusesUnknownMembers: a definition with a member the admin API does not know (a
// typo such as "limt", or "reveal", which is configuration-only) is bad input: 400, and nothing
// is defined. Ignoring it would define the sale with a default the operator did not ask for.
func TestAdminPutRefusesUnknownMembers(t *testing.T) {
	now := time.Now()
	_, adminAddr := startCaddyAdmin(t,
		jwtBlock+"captcha off\n"+activityBlock("adm", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), route)
	admin := "http://" + adminAddr
	call := adminCaller(t, admin)
	window := fmt.Sprintf(`"start":%q,"end":%q`, rfc3339(now.Add(time.Hour)), rfc3339(now.Add(2*time.Hour)))
	for _, body := range []string{
		`{"stock":10,"limt":5,` + window + `}`,
		`{"stock":10,"limit":2,"reveal":"5s",` + window + `}`,
		`{"stock":10,"limit":2,"pay_witin":"1m",` + window + `}`,
	} {
		status, ans := call(http.MethodPut, "/seckill/activities/typo", body)
		if status != http.StatusBadRequest {
			t.Errorf("PUT %s: %d %s; want 400", body, status, ans)
		}
		if status, ans := call(http.MethodGet, "/seckill/activities/typo", ""); status != http.StatusNotFound {
			t.Fatalf("after PUT %s the activity exists: %d %s", body, status, ans)
		}
	}
	// A release body with an unknown member is refused too, and releases nothing.
	if status, ans := call(http.MethodPost, "/seckill/activities/adm/release", `{"reservation":"x"}`); status != http.StatusBadRequest {
		t.Errorf("release with an unknown member: %d %s; want 400", status, ans)
	}
}

package caddymodule_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOrdersEarlierSale deletes an activity whose order stays in the embedded order database:
// its id cannot be defined anew, through the admin API or a reload, because the new sale would
// count the old orders against its stock and refuse its winners' orders, lost wins and stock
// never sold (found in review). Nothing is defined by the refusal; a new id sells as usual.
func TestOrdersEarlierSale(t *testing.T) {
	db := filepath.Join(t.TempDir(), "orders.db")
	s := startSale(t, jwtBlock+"captcha off\n"+ordersOption("sqlite "+db)+saleBlock("old", 1))
	c := s.Client
	alice := token(t, "alice")
	expect(t, "alice buys", c.Post(buyPath(t, c, "old", alice), alice, ""), http.StatusAccepted, "queued")
	waitResult(t, c, "old", alice, "pending_payment")
	if status, body := s.AdminCall(t, http.MethodDelete, "/seckill/activities/old?force=1", ""); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}

	now := time.Now()
	def := fmt.Sprintf(`{"stock":1,"start":%q,"end":%q,"pay_within":"1m"}`,
		now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	status, body := s.AdminCall(t, http.MethodPut, "/seckill/activities/old", def)
	if status != http.StatusConflict || !strings.Contains(string(body), "give the new sale a new activity id") ||
		!strings.Contains(string(body), "1 items sold there") {
		t.Errorf("define the deleted id anew: %d %s; want 409 with the advice", status, body)
	}
	if status, body := s.AdminCall(t, http.MethodGet, "/seckill/activities/old", ""); status != http.StatusNotFound {
		t.Errorf("the refused definition defined something: %d %s", status, body)
	}

	// The configuration still lists the activity: a reload is refused, before it defines anything.
	text, err := os.ReadFile(s.ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := loadCaddyfile(t, string(text)); err == nil || !strings.Contains(err.Error(), "give the new sale a new activity id") {
		t.Errorf("reload over the deleted sale's orders: %v; want the refusal", err)
	}
	if status, body := s.AdminCall(t, http.MethodGet, "/seckill/activities/old", ""); status != http.StatusNotFound {
		t.Errorf("the refused reload defined the activity: %d %s", status, body)
	}

	// A new id is a new sale, and its winner's order is made.
	if status, body := s.AdminCall(t, http.MethodPut, "/seckill/activities/new", def); status != http.StatusOK {
		t.Fatalf("define a new id: %d %s", status, body)
	}
	bob := token(t, "bob")
	expect(t, "bob buys", c.Post(buyPath(t, c, "new", bob), bob, ""), http.StatusAccepted, "queued")
	waitResult(t, c, "new", bob, "pending_payment")
}

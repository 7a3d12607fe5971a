package caddymodule_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// TestStatusPriceTitle: the status call, which the sale page reads, carries the configured price
// (exact in minor units, and written out) and title; an activity without them carries neither.
func TestStatusPriceTitle(t *testing.T) {
	now := time.Now()
	priced := fmtActivity("priced", now, "\tprice 199.00 usd\n\ttitle \"Demo Phone 12, 128 GB\"\n")
	plain := fmtActivity("plain", now, "")
	c := newClient(t, startCaddy(t, jwtBlock+"captcha off\n"+priced+plain, route))

	r := c.Get("/seckill/priced", "")
	expect(t, "status", r, http.StatusOK, "ok")
	var body struct {
		Title string          `json:"title"`
		Price json.RawMessage `json:"price"`
	}
	if err := json.Unmarshal(r.Raw, &body); err != nil {
		t.Fatal(err)
	}
	if body.Title != "Demo Phone 12, 128 GB" {
		t.Errorf("title = %q", body.Title)
	}
	if want := `{"amount":19900,"currency":"USD","display":"199.00 USD"}`; string(body.Price) != want {
		t.Errorf("price = %s, want %s", body.Price, want)
	}

	r = c.Get("/seckill/plain", "")
	expect(t, "status without price", r, http.StatusOK, "ok")
	if _, ok := r.Body["price"]; ok {
		t.Errorf("an activity without a price shows one: %s", r)
	}
	if _, ok := r.Body["title"]; ok {
		t.Errorf("an activity without a title shows one: %s", r)
	}
}

// fmtActivity is an activity open now, with extra options.
func fmtActivity(id string, now time.Time, extra string) string {
	return "activity " + id + " {\n\tstock 5\n\tstart " + rfc3339(now.Add(-time.Minute)) +
		"\n\tend " + rfc3339(now.Add(time.Hour)) + "\n" + extra + "}\n"
}

package orderbackend

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/money"
)

// httpPayments is a provider reached over HTTP, so that it outlives the process that charges it:
// POST {url}/charge with the request as JSON, answered with a ChargeResult.
type httpPayments struct{ url string }

func (h httpPayments) Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error) {
	b, _ := json.Marshal(map[string]any{"key": c.Key, "amount": c.Amount})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/charge", bytes.NewReader(b))
	if err != nil {
		return ChargeResult{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ChargeResult{}, err
	}
	defer resp.Body.Close()
	var r ChargeResult
	return r, json.NewDecoder(resp.Body).Decode(&r)
}

func (h httpPayments) Lookup(context.Context, string) (ChargeResult, error) {
	return ChargeResult{}, errProviderDown // the child never gets this far
}

func (h httpPayments) Refund(context.Context, string, string, money.Price) error {
	return errProviderDown
}

// TestPayKillChild is the child of the KillBetweenChargeAndPaid scenario: it pays an order through the
// API against the parent's provider, which takes the money and then has the child SIGKILLed
// before it answers.
func TestPayKillChild(t *testing.T) {
	kind, dsn, url, id := os.Getenv("SECKILL_PAYKILL_KIND"), os.Getenv("SECKILL_PAYKILL_DB"), os.Getenv("SECKILL_PAYKILL_PROVIDER"),
		os.Getenv("SECKILL_PAYKILL_ORDER")
	if dsn == "" {
		t.Skip("the child of the KillBetweenChargeAndPaid scenario")
	}
	repo, err := OpenRepository(context.Background(), kind, dsn)
	if err != nil {
		t.Fatal(err)
	}
	api, err := NewAPI(repo, APIOptions{Auth: testAuth(t), Payments: httpPayments{url}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, "/orders/"+id+"/pay", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, "u1"))
	w := httptest.NewRecorder()
	api.ServeHTTP(w, req) // killed in here
	t.Fatalf("the pay call returned %d %s: the child was to be killed first", w.Code, w.Body)
}

// A process killed after the provider took the money and before the order was marked paid: the
// attempt it recorded first is found by the sweeper, which asks the provider by the attempt's key
// and pays the order (or refunds it, had the window closed). Nothing is charged twice.
func testKillBetweenChargeAndPaid(t *testing.T, e *env) {
	ctx := context.Background()
	repo, kind := e.repo, "sqlite"
	if e.pg != nil {
		kind = "postgres"
	}
	if err := repo.EnsureStock(ctx, "sale", 1); err != nil {
		t.Fatal(err)
	}
	n := newOrder("sale", "r1", "u1", 1, time.Now().Add(time.Hour))
	n.Amount = money.Price{Amount: 19900, Currency: "USD"}
	o, _, err := repo.CreateOrder(ctx, n)
	if err != nil {
		t.Fatal(err)
	}

	pay := newRecorder()
	charged := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c struct {
			Key    string      `json:"key"`
			Amount money.Price `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := pay.Charge(r.Context(), ChargeRequest{Key: c.Key, Amount: c.Amount}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		charged <- struct{}{}
		<-r.Context().Done() // the answer never leaves: the child dies first
	}))
	t.Cleanup(srv.Close)

	child, _ := testsrv.StartChild(t, "TestPayKillChild", "SECKILL_PAYKILL_KIND="+kind,
		"SECKILL_PAYKILL_DB="+e.dsn, "SECKILL_PAYKILL_PROVIDER="+srv.URL, "SECKILL_PAYKILL_ORDER="+o.ID)
	select {
	case <-charged:
	case <-time.After(2 * time.Minute):
		t.Fatal("the child never charged")
	}
	testsrv.KillChild(t, child)

	ps, err := repo.Payments(ctx, "sale")
	if err != nil || len(ps) != 1 || ps[0].Status != PaymentStarted || pay.Charged(o.ID) != 1 {
		t.Fatalf("after the kill: payments %+v, %v; charged %d", ps, err, pay.Charged(o.ID))
	}
	if got, _ := repo.Order(ctx, o.ID); got.Status != StatusPending {
		t.Fatalf("after the kill the order is %s", got.Status)
	}
	sw := NewSweeper(repo, SweeperOptions{Payments: pay, SettleAfter: time.Nanosecond, Logger: zap.NewNop()})
	if _, err := sw.Once(ctx); err != nil {
		t.Fatal(err)
	}
	got, _ := repo.Order(ctx, o.ID)
	ps, _ = repo.Payments(ctx, "sale")
	if got.Status != StatusPaid || got.PaymentRef != o.ID+"-1" || len(ps) != 1 || ps[0].Status != PaymentSucceeded ||
		pay.Charged(o.ID) != 1 || pay.Refunded(o.ID) != 0 {
		t.Fatalf("after the sweep: order %+v, payments %+v, charged %d refunded %d", got, ps, pay.Charged(o.ID), pay.Refunded(o.ID))
	}
	orders, _ := repo.Orders(ctx, "sale")
	var r Report
	r.reconcileMoney(orders, ps)
	if r.Charges != 1 || r.ChargedAmount != 19900 || r.ChargedUnpaid != 0 || r.UnsettledPayments != 0 || r.PaidWithoutCharge != 0 {
		t.Errorf("money = %+v", r)
	}
}

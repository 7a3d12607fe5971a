package mockpay

import (
	"context"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/money"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

func TestProvider(t *testing.T) {
	ctx := context.Background()
	var p Provider
	amt := money.Price{Amount: 19900, Currency: "USD"}
	if r, err := p.Lookup(ctx, "o1-1"); err != nil || r.Outcome != orderbackend.ChargeFailed {
		t.Fatalf("lookup before = %+v, %v", r, err)
	}
	if err := p.Refund(ctx, "o1-1", "mock_o1-1", amt); err == nil {
		t.Fatal("refund of nothing succeeded")
	}
	for range 2 {
		r, err := p.Charge(ctx, orderbackend.ChargeRequest{Key: "o1-1", Amount: amt})
		if err != nil || r.Outcome != orderbackend.ChargeSucceeded || r.Ref != "mock_o1-1" {
			t.Fatalf("charge = %+v, %v", r, err)
		}
	}
	if r, _ := p.Lookup(ctx, "o1-1"); r.Outcome != orderbackend.ChargeSucceeded || r.Ref != "mock_o1-1" {
		t.Fatalf("lookup = %+v", r)
	}
	if err := p.Refund(ctx, "o1-1", "mock_o1-1", money.Price{Amount: 1, Currency: "USD"}); err == nil {
		t.Error("a refund of another amount succeeded")
	}
	if err := p.Refund(ctx, "o1-1", "mock_o1-1", amt); err != nil || !p.Refunded("o1-1") || !p.Charged("o1-1") {
		t.Errorf("refund: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Charge(cctx, orderbackend.ChargeRequest{Key: "o2-1"}); err == nil || p.Charged("o2-1") {
		t.Error("a cancelled charge was taken")
	}
}

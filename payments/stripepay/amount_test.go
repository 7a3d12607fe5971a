package stripepay

import (
	"errors"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/money"
)

func TestAmount(t *testing.T) {
	for _, c := range []struct {
		price    string
		currency string
		want     int64
		code     string
	}{
		{"199.00", "USD", 19900, "usd"},
		{"0.50", "EUR", 50, "eur"},
		{"1999", "JPY", 1999, "jpy"},
		{"5", "ISK", 500, "isk"},
		{"2500.00", "MGA", 2500, "mga"},
		{"1.23", "KWD", 1230, "kwd"},
		{"12.34", "HUF", 1234, "huf"},
		{"12.34", "TWD", 1234, "twd"},
		{"1000", "UGX", 1000, "ugx"},
	} {
		p, err := money.Parse(c.price, c.currency)
		if err != nil {
			t.Fatal(err)
		}
		n, code, err := Amount(p)
		if err != nil || n != c.want || code != c.code {
			t.Errorf("Amount(%s) = %d %s, %v; want %d %s", p, n, code, err, c.want, c.code)
		}
	}
	for _, p := range []money.Price{
		{Amount: 50, Currency: "MGA"},   // 0.50 MGA: Stripe's MGA has no decimals
		{Amount: 1234, Currency: "KWD"}, // 1.234 KWD: Stripe's last digit must be 0
		{Amount: 0, Currency: "USD"},
		{Amount: 100, Currency: ""},
		{Amount: 100, Currency: "XYZ"},
	} {
		if n, _, err := Amount(p); !errors.Is(err, ErrInexactAmount) {
			t.Errorf("Amount(%+v) = %d, %v; want ErrInexactAmount", p, n, err)
		}
	}
}

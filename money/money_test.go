package money

import (
	"errors"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		amount, currency string
		want             Price
		decimal          string
	}{
		{"199", "USD", Price{19900, "USD"}, "199.00"},
		{"199.9", "usd", Price{19990, "USD"}, "199.90"},
		{"0.05", "EUR", Price{5, "EUR"}, "0.05"},
		{"007.50", "CNY", Price{750, "CNY"}, "7.50"},
		{"1999", "JPY", Price{1999, "JPY"}, "1999"},
		{"1.234", "KWD", Price{1234, "KWD"}, "1.234"},
		{"0", "USD", Price{0, "USD"}, "0.00"},
		{"10000000000000", "USD", Price{MaxAmount, "USD"}, "10000000000000.00"},
	} {
		got, err := Parse(c.amount, c.currency)
		if err != nil || got != c.want || got.Decimal() != c.decimal {
			t.Errorf("Parse(%q, %q) = %+v (%s), %v; want %+v (%s)", c.amount, c.currency, got, got.Decimal(), err, c.want, c.decimal)
		}
		if back, err := Parse(got.Decimal(), got.Currency); err != nil || back != got {
			t.Errorf("%s does not read back: %+v, %v", got, back, err)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range [][2]string{
		{"199", "XYZ"}, {"199", "US"}, {"199", "D A"}, {"199", ""}, {"199", "usdd"},
		{"-1", "USD"}, {"1.", "USD"}, {".5", "USD"}, {"1.005", "USD"}, {"1.5", "JPY"},
		{"1e3", "USD"}, {"1,00", "EUR"}, {" 1", "USD"}, {"", "USD"}, {"+1", "USD"},
		{"10000000000000.01", "USD"}, {"99999999999999999999", "JPY"},
	} {
		if p, err := Parse(c[0], c[1]); !errors.Is(err, ErrBadPrice) {
			t.Errorf("Parse(%q, %q) = %+v, %v; want ErrBadPrice", c[0], c[1], p, err)
		}
	}
}

func TestExponent(t *testing.T) {
	for code, want := range map[string]int{"USD": 2, "JPY": 0, "KWD": 3, "CNY": 2, "CLF": 4, "EUR": 2} {
		if e, ok := Exponent(code); !ok || e != want {
			t.Errorf("Exponent(%s) = %d, %v; want %d", code, e, ok, want)
		}
	}
}

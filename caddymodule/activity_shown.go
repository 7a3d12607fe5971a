package caddymodule

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/caddy-seckill/caddy-seckill/money"
)

// maxTitleLen bounds a title in bytes: it is shown on the page and stored with every order.
const maxTitleLen = 200

// validatePrice checks a price a JSON configuration gives directly (the Caddyfile's goes through
// money.Parse): something to charge, in a currency with known minor units.
func validatePrice(p money.Price) error {
	if _, ok := money.Exponent(p.Currency); !ok {
		return fmt.Errorf("currency %q is not an ISO 4217 code in upper case (for instance USD, EUR, CNY, JPY)", p.Currency)
	}
	if p.Amount <= 0 || p.Amount > money.MaxAmount {
		return fmt.Errorf("amount %d (minor units) must be positive and at most %d", p.Amount, int64(money.MaxAmount))
	}
	return nil
}

// validateTitle checks a title: text a page can show, bounded.
func validateTitle(t string) error {
	switch {
	case len(t) > maxTitleLen:
		return fmt.Errorf("%d bytes is longer than %d", len(t), maxTitleLen)
	case !utf8.ValidString(t):
		return errors.New("not valid UTF-8")
	case strings.ContainsFunc(t, unicode.IsControl):
		return errors.New("contains a control character")
	}
	return nil
}

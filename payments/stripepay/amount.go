package stripepay

import (
	"errors"
	"fmt"
	"strings"

	"github.com/caddy-seckill/caddy-seckill/money"
)

// ErrInexactAmount is wrapped by Amount's errors: Stripe cannot charge the price exactly in its
// currency, so the charge is refused rather than rounded.
var ErrInexactAmount = errors.New("stripe cannot charge this amount exactly")

// stripeDigits lists the currencies whose Stripe amount unit differs from two decimals (Stripe's
// "Supported currencies" page): the zero-decimal ones, ISK (zero-decimal in ISO 4217, but Stripe
// keeps two decimals for backwards compatibility, "00" cents) and the three-decimal ones.
var stripeDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "JPY": 0, "KMF": 0, "KRW": 0, "MGA": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"ISK": 2,
	"BHD": 3, "JOD": 3, "KWD": 3, "OMR": 3, "TND": 3,
}

// threeDecimal currencies take amounts whose last digit is 0 (Stripe rounds them to tens).
const threeDecimal = 3

// Amount converts p (ISO 4217 minor units) to Stripe's amount and lower-case currency: JPY 1999
// stays 1999 (yen), ISK 5 becomes 500, MGA 2500.00 (250000 in ISO's minor units) becomes 2500, KWD
// 1.230 stays 1230. A price Stripe cannot take exactly (MGA 0.50, KWD 1.234) is an error wrapping
// ErrInexactAmount; an unknown currency is an error too.
func Amount(p money.Price) (int64, string, error) {
	iso, ok := money.Exponent(p.Currency)
	if !ok {
		return 0, "", fmt.Errorf("%w: %q is not an ISO 4217 currency", ErrInexactAmount, p.Currency)
	}
	if p.Amount <= 0 {
		return 0, "", fmt.Errorf("%w: %s is not a positive amount", ErrInexactAmount, p)
	}
	digits, ok := stripeDigits[p.Currency]
	if !ok {
		digits = 2
	}
	n := p.Amount
	for ; iso < digits; iso++ {
		n *= 10
	}
	for ; iso > digits; iso-- {
		if n%10 != 0 {
			return 0, "", fmt.Errorf("%w: %s has %d decimals at Stripe", ErrInexactAmount, p, digits)
		}
		n /= 10
	}
	if digits == threeDecimal && n%10 != 0 {
		return 0, "", fmt.Errorf("%w: %s: Stripe takes %s amounts whose last digit is 0", ErrInexactAmount, p, p.Currency)
	}
	return n, strings.ToLower(p.Currency), nil
}

// Package money holds a price: an amount in its currency's minor units, read from the decimal a
// shop writes ("199.00 USD"). Integer minor units keep sums and refunds exact; the currency's
// exponent (ISO 4217) says where the point goes.
package money

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxAmount bounds an amount in minor units, far above any price and far below int64's limit, so
// a sum of many prices cannot overflow.
const MaxAmount = 1_000_000_000_000_000

// ErrBadPrice is wrapped by every error Parse returns.
var ErrBadPrice = errors.New("bad price")

// Price is an amount of money in one currency.
type Price struct {
	// Amount is in the currency's minor units: cents for USD, yen for JPY, fils for KWD.
	Amount int64 `json:"amount"`
	// Currency is the ISO 4217 code, upper case.
	Currency string `json:"currency"`
}

// IsZero reports whether p is the zero Price (no price set).
func (p Price) IsZero() bool { return p == Price{} }

// Decimal writes the amount as a decimal in major units with the currency's digits: "199.00".
func (p Price) Decimal() string {
	e, ok := Exponent(p.Currency)
	if !ok || e == 0 {
		return strconv.FormatInt(p.Amount, 10)
	}
	s := strconv.FormatInt(p.Amount, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for len(s) <= e {
		s = "0" + s
	}
	s = s[:len(s)-e] + "." + s[len(s)-e:]
	if neg {
		s = "-" + s
	}
	return s
}

// String writes the price as the Caddyfile takes it: "199.00 USD".
func (p Price) String() string { return p.Decimal() + " " + p.Currency }

// Parse reads a decimal amount in major units ("199", "199.9", "199.00") and an ISO 4217 currency
// code (any case). The amount may have at most the currency's digits after the point, may not be
// negative and may not pass MaxAmount minor units.
func Parse(amount, currency string) (Price, error) {
	code := strings.ToUpper(currency)
	e, ok := Exponent(code)
	if !ok {
		return Price{}, fmt.Errorf("%w: %q is not an ISO 4217 currency code (for instance USD, EUR, CNY, JPY)", ErrBadPrice, currency)
	}
	whole, frac, hasPoint := strings.Cut(amount, ".")
	if whole == "" || !digits(whole) || (hasPoint && (frac == "" || !digits(frac))) {
		return Price{}, fmt.Errorf("%w: amount %q is not a decimal number such as 199 or 199.00", ErrBadPrice, amount)
	}
	if len(frac) > e {
		return Price{}, fmt.Errorf("%w: amount %q has %d digits after the point; %s has %d", ErrBadPrice, amount, len(frac), code, e)
	}
	frac += strings.Repeat("0", e-len(frac))
	whole = strings.TrimLeft(whole, "0")
	if len(whole)+e > 16 {
		return Price{}, fmt.Errorf("%w: amount %q is too large", ErrBadPrice, amount)
	}
	var n int64
	if s := strings.TrimLeft(whole+frac, "0"); s != "" {
		var err error
		if n, err = strconv.ParseInt(s, 10, 64); err != nil {
			return Price{}, fmt.Errorf("%w: amount %q: %w", ErrBadPrice, amount, err)
		}
	}
	if n > MaxAmount {
		return Price{}, fmt.Errorf("%w: amount %q is too large", ErrBadPrice, amount)
	}
	return Price{Amount: n, Currency: code}, nil
}

func upperLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Exponent returns the number of digits after the decimal point of an ISO 4217 currency (2 for
// USD, 0 for JPY, 3 for KWD), and false for a code that is not a current ISO 4217 currency.
func Exponent(code string) (int, bool) {
	if len(code) != 3 || !upperLetters(code) {
		return 0, false
	}
	for e, codes := range exponents {
		if strings.Contains(" "+codes+" ", " "+code+" ") {
			return e, true
		}
	}
	return 0, false
}

// exponents lists the current ISO 4217 codes (list one, 2025) by their minor-unit digits,
// excluding funds, precious metals and testing codes.
var exponents = [...]string{
	0: "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF",
	1: "",
	2: "AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BMD BND BOB BRL BSD BTN BWP BYN BZD " +
		"CAD CDF CHF CNY COP CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP GEL GHS GIP GMD " +
		"GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK LBP LKR LRD LSL MAD " +
		"MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP " +
		"PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS " +
		"TMT TOP TRY TTD TWD TZS UAH USD UYU UZS VED VES WST XCD XCG YER ZAR ZMW ZWG",
	3: "BHD IQD JOD KWD LYD OMR TND",
	4: "CLF UYW",
}

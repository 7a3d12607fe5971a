package webhookpay

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader carries the signature of every message between the order backend and the
// shop's payment service, in both directions.
const SignatureHeader = "Seckill-Signature"

// DefaultTolerance is how far a signature's time may be from the receiver's clock: 5 minutes, as
// Stripe's webhooks.
const DefaultTolerance = 5 * time.Minute

// ErrBadSignature: a Seckill-Signature header that is missing, malformed, not made with the
// secret over this body, or whose time is outside the tolerance.
var ErrBadSignature = errors.New("bad Seckill-Signature")

// Sign returns the Seckill-Signature header value of body at t: "t=<unix seconds>,v1=<lowercase
// hex HMAC-SHA256(secret, "<unix seconds>.<body>")>", Stripe's scheme.
func Sign(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, body))
}

func mac(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a Seckill-Signature header value against body: one of its v1 signatures must be
// the secret's, and its time within tolerance of now, before or after (a replay later than that is
// refused; within it the receiver deduplicates by event id). Several v1 entries are allowed so
// that a sender can sign with an old and a new secret while they are rotated.
func Verify(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if len(secret) == 0 {
		return fmt.Errorf("%w: no secret configured", ErrBadSignature)
	}
	if header == "" {
		return fmt.Errorf("%w: no %s header", ErrBadSignature, SignatureHeader)
	}
	var (
		ts   string
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return fmt.Errorf("%w: malformed %q", ErrBadSignature, part)
		case k == "t":
			ts = v
		case k == "v1":
			if s, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, s)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return fmt.Errorf("%w: want t=<unix seconds>,v1=<hex>", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed at %s, %s from now: outside the tolerance of %s", ErrBadSignature,
			time.Unix(sec, 0).UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches", ErrBadSignature)
}

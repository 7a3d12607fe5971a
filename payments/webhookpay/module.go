package webhookpay

import (
	"fmt"
	"net/url"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

func init() {
	caddy.RegisterModule(Module{})
}

// MinSecret is the shortest secret taken, in bytes: an HMAC key shorter than this is guessable.
const MinSecret = 16

// Module is the Caddy guest module seckill.payments.webhook: the embedded order backend charges
// through the shop's payment service at URL and takes its signed notifications.
type Module struct {
	// URL is the shop's payment service, which takes the signed charge, lookup and refund requests.
	URL string `json:"url"`
	// Secret signs and verifies every message (at least 16 bytes); placeholders such as
	// {env.SECKILL_WEBHOOK_SECRET} are expanded at Provision.
	Secret string `json:"secret"`
	// Tolerance is how far a signature's time may be from this clock; default 5m.
	Tolerance caddy.Duration `json:"tolerance,omitempty"`

	secret string // Secret expanded
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "seckill.payments.webhook", New: func() caddy.Module { return new(Module) }}
}

// Provision expands the secret and checks the configuration.
func (m *Module) Provision(caddy.Context) error {
	if err := CheckURL(m.URL); err != nil {
		return fmt.Errorf("payments webhook: %w", err)
	}
	m.secret = caddy.NewReplacer().ReplaceAll(m.Secret, "")
	if err := CheckSecret(m.secret); err != nil {
		return fmt.Errorf("payments webhook: secret (%q): %w", m.Secret, err)
	}
	if m.Tolerance < 0 {
		return fmt.Errorf("payments webhook: tolerance %s is negative", time.Duration(m.Tolerance))
	}
	return nil
}

// CheckURL accepts an absolute http(s) URL with a host: the shop's payment service.
func CheckURL(s string) error {
	u, err := url.Parse(s)
	if s == "" || err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" {
		return fmt.Errorf("url %q is not an absolute http(s) URL such as https://pay.shop.example/seckill", s)
	}
	return nil
}

// CheckSecret accepts a secret of at least MinSecret bytes.
func CheckSecret(s string) error {
	if len(s) < MinSecret {
		return fmt.Errorf("%d bytes: want at least %d (e.g. openssl rand -hex 32)", len(s), MinSecret)
	}
	return nil
}

// OpenPayments returns a Provider for the configured service and secret.
func (m *Module) OpenPayments(logger *zap.Logger) (orderbackend.Payments, error) {
	return New(m.URL, []byte(m.secret), time.Duration(m.Tolerance), nil, logger), nil
}

// UnmarshalCaddyfile reads the provider's Caddyfile syntax, inside the global seckill block's
// orders block. Syntax:
//
//	payments webhook {
//		url       <url>       # required: the shop's payment service
//		secret    <secret>    # required, 16 bytes or more; e.g. {env.SECKILL_WEBHOOK_SECRET}
//		tolerance <duration>  # how far a signature's time may be from this clock; default 5m
//	}
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module name
	start := d.Token()
	if d.NextArg() {
		return d.Errf("seckill: payments webhook: unexpected %q: options go in its block", d.Val())
	}
	err := caddyfileargs.ParseBlock(d, "seckill", "payments webhook: ", func(opt string) error {
		var err error
		switch opt {
		case "url":
			if m.URL, err = caddyfileargs.OneArg(d); err == nil {
				if cerr := CheckURL(m.URL); cerr != nil {
					err = d.Errf("seckill: payments webhook: %v", cerr)
				}
			}
		case "secret":
			m.Secret, err = caddyfileargs.SecretArg(d, "payments webhook secret")
			if err == nil && caddy.NewReplacer().ReplaceAll(m.Secret, "") == m.Secret {
				// A literal (not {env.…}): check it here, with its line.
				if cerr := CheckSecret(m.Secret); cerr != nil {
					err = d.Errf("seckill: payments webhook: secret: %v", cerr)
				}
			}
		case "tolerance":
			m.Tolerance, err = caddyfileargs.PositiveDurationArg(d, "payments webhook tolerance")
		default:
			err = d.Errf("seckill: payments webhook: unknown option %q: want url, secret or tolerance", opt)
		}
		return err
	})
	if err != nil {
		return err
	}
	switch {
	case m.URL == "":
		return caddyfileargs.ErrAt(start, "seckill: payments webhook: url is required: the shop's payment service")
	case m.Secret == "":
		return caddyfileargs.ErrAt(start, "seckill: payments webhook: secret is required, e.g. secret {env.SECKILL_WEBHOOK_SECRET}")
	}
	return nil
}

var (
	_ caddy.Module          = (*Module)(nil)
	_ caddy.Provisioner     = (*Module)(nil)
	_ caddyfile.Unmarshaler = (*Module)(nil)
)

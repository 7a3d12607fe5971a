package stripepay

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

// Module is the Caddy guest module seckill.payments.stripe: the embedded order backend charges
// buyers through Stripe.
type Module struct {
	// SecretKey is the Stripe secret key (sk_live_…, sk_test_…); placeholders such as
	// {env.STRIPE_SECRET_KEY} are expanded at Provision.
	SecretKey string `json:"secret_key"`
	// APIBase is the Stripe API's base URL; DefaultAPIBase when empty (another for stripe-mock or
	// a staging proxy).
	APIBase string `json:"api_base,omitempty"`
	// WebhookSecret is the signing secret (whsec_…) of the Stripe webhook endpoint that points
	// at {orders prefix}/webhooks/stripe; placeholders are expanded at Provision. Empty: Stripe's
	// notifications are refused (400 bad_signature).
	WebhookSecret string `json:"webhook_secret,omitempty"`
	// WebhookTolerance is how old a notification's signature may be; default 5m (Stripe's).
	WebhookTolerance caddy.Duration `json:"webhook_tolerance,omitempty"`

	key, whsec string // SecretKey and WebhookSecret expanded
}

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "seckill.payments.stripe", New: func() caddy.Module { return new(Module) }}
}

// Provision expands the secret key and checks the configuration.
func (m *Module) Provision(caddy.Context) error {
	m.key = caddy.NewReplacer().ReplaceAll(m.SecretKey, "")
	if m.key == "" {
		return fmt.Errorf("payments stripe: secret_key is empty (%q): set it, e.g. secret_key {env.STRIPE_SECRET_KEY} with that variable set", m.SecretKey)
	}
	if err := checkAPIBase(m.APIBase); err != nil {
		return fmt.Errorf("payments stripe: %w", err)
	}
	m.whsec = caddy.NewReplacer().ReplaceAll(m.WebhookSecret, "")
	if m.WebhookSecret != "" && m.whsec == "" {
		return fmt.Errorf("payments stripe: webhook_secret is empty (%q): set that variable, or remove the option", m.WebhookSecret)
	}
	if m.WebhookTolerance < 0 {
		return fmt.Errorf("payments stripe: webhook_tolerance %s is negative", time.Duration(m.WebhookTolerance))
	}
	return nil
}

// checkAPIBase accepts "" (Stripe's) or an absolute http(s) URL with a host.
func checkAPIBase(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("api_base %q is not an http(s) URL such as %s", s, DefaultAPIBase)
	}
	return nil
}

// OpenPayments returns a Provider with the configured key and API base.
func (m *Module) OpenPayments(logger *zap.Logger) (orderbackend.Payments, error) {
	return New(m.key, m.APIBase, logger, WithWebhook(m.whsec, time.Duration(m.WebhookTolerance))), nil
}

// UnmarshalCaddyfile reads the provider's Caddyfile syntax, inside the global seckill block's
// orders block. Syntax:
//
//	payments stripe {
//		secret_key        <key>       # required; e.g. {env.STRIPE_SECRET_KEY} (read at start)
//		api_base          <url>       # default https://api.stripe.com
//		webhook_secret    <secret>    # the webhook endpoint's signing secret, e.g. {env.STRIPE_WEBHOOK_SECRET}
//		webhook_tolerance <duration>  # how old a webhook's signature may be; default 5m
//	}
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the module name
	start := d.Token()
	if d.NextArg() {
		return d.Errf("seckill: payments stripe: unexpected %q: options go in its block", d.Val())
	}
	err := caddyfileargs.ParseBlock(d, "seckill", "payments stripe: ", func(opt string) error {
		var err error
		switch opt {
		case "secret_key":
			m.SecretKey, err = caddyfileargs.SecretArg(d, "payments stripe secret_key")
		case "api_base":
			if m.APIBase, err = caddyfileargs.OneArg(d); err == nil {
				if cerr := checkAPIBase(m.APIBase); cerr != nil {
					err = d.Errf("seckill: payments stripe: %v", cerr)
				}
			}
		case "webhook_secret":
			m.WebhookSecret, err = caddyfileargs.SecretArg(d, "payments stripe webhook_secret")
		case "webhook_tolerance":
			m.WebhookTolerance, err = caddyfileargs.PositiveDurationArg(d, "payments stripe webhook_tolerance")
		default:
			err = d.Errf("seckill: payments stripe: unknown option %q: want secret_key, api_base, webhook_secret or webhook_tolerance", opt)
		}
		return err
	})
	if err != nil {
		return err
	}
	if m.SecretKey == "" {
		return caddyfileargs.ErrAt(start, "seckill: payments stripe: secret_key is required, e.g. secret_key {env.STRIPE_SECRET_KEY}")
	}
	return nil
}

var (
	_ caddy.Module          = (*Module)(nil)
	_ caddy.Provisioner     = (*Module)(nil)
	_ caddyfile.Unmarshaler = (*Module)(nil)
)

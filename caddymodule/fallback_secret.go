package caddymodule

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// FallbackSecretPrefix starts every try-out secret, such as Caddyfile.example's fallbacks
// ({$SECKILL_JWT_SECRET:dev-only-jwt-secret-do-not-deploy}). Those values are published, so
// anyone can sign tokens, buy paths or forwarded winners with them.
const FallbackSecretPrefix = "dev-only"

// The secrets a fallback can stand in for: the label values of caddy_seckill_fallback_secret.
const (
	secretJWT     = "jwt"
	secretURL     = "url"
	secretForward = "forward"
)

// fallbackSecrets returns the names of the secrets in use that are try-out fallbacks.
func fallbackSecrets(jwtSecret, urlSecret, forwardSecret []byte) []string {
	var names []string
	for _, s := range []struct {
		name  string
		value []byte
	}{{secretJWT, jwtSecret}, {secretURL, urlSecret}, {secretForward, forwardSecret}} {
		if strings.HasPrefix(string(s.value), FallbackSecretPrefix) {
			names = append(names, s.name)
		}
	}
	return names
}

// registerFallbackGauge registers caddy_seckill_fallback_secret{secret}, every secret at 0 until
// warnFallbackSecrets sets it.
func registerFallbackGauge(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: metricsNamespace,
		Subsystem: metricsSubsystem,
		Name:      "fallback_secret",
		Help: "1 when the secret (jwt, url, forward) is a try-out fallback (it starts with " + FallbackSecretPrefix +
			", as Caddyfile.example's do) and a listener of this Caddy is reachable beyond loopback; else 0.",
	}, []string{"secret"})
	for _, s := range []string{secretJWT, secretURL, secretForward} {
		g.WithLabelValues(s)
	}
	if err := reg.Register(g); err != nil {
		var dup prometheus.AlreadyRegisteredError
		if errors.As(err, &dup) {
			if existing, ok := dup.ExistingCollector.(*prometheus.GaugeVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	return g, nil
}

// warnFallbackSecrets logs a warning and sets the gauge when a fallback secret serves a listener
// beyond loopback: the published secret then lets anyone who can reach it sign in as anyone.
// It runs at every Start, so each configuration load says it once.
func (a *App) warnFallbackSecrets(listeners []string) {
	exposed := exposedListeners(listeners)
	for _, s := range []string{secretJWT, secretURL, secretForward} {
		v := 0.0
		if len(exposed) > 0 && slices.Contains(a.fallback, s) {
			v = 1
		}
		if a.fallbackGauge != nil {
			a.fallbackGauge.WithLabelValues(s).Set(v)
		}
	}
	if len(a.fallback) == 0 || len(exposed) == 0 {
		return
	}
	a.logger.Warn("a try-out fallback secret serves listeners beyond loopback: anyone can forge what it signs; "+
		"set the secrets' environment variables (32+ random bytes each)",
		zap.Strings("secrets", a.fallback), zap.Strings("listeners", exposed),
		zap.String("prefix", FallbackSecretPrefix))
}

// httpListeners returns the listen addresses of every server of the configuration's http app.
func httpListeners(ctx caddy.Context) []string {
	app := httpApp(ctx)
	if app == nil {
		return nil
	}
	var out []string
	for _, srv := range app.Servers {
		out = append(out, srv.Listen...)
	}
	return out
}

// httpApp returns the configuration's HTTP app, nil when it has none.
func httpApp(ctx caddy.Context) *caddyhttp.App {
	v, err := ctx.AppIfConfigured("http")
	if err != nil {
		return nil
	}
	app, _ := v.(*caddyhttp.App)
	return app
}

// exposedListeners returns the addresses of listeners reachable from beyond this machine: every
// one but loopback addresses, localhost and Unix sockets (a host name may resolve anywhere).
func exposedListeners(listeners []string) []string {
	var out []string
	for _, l := range listeners {
		na, err := caddy.ParseNetworkAddress(l)
		if err == nil && (na.IsUnixNetwork() || na.Host == "localhost") {
			continue
		}
		if err == nil {
			if ip, err := netip.ParseAddr(na.Host); err == nil && ip.Unmap().IsLoopback() {
				continue
			}
		}
		out = append(out, l)
	}
	return out
}

package caddymodule

import (
	"reflect"
	"slices"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
)

// warnLooseProxies logs one warning naming the HTTP servers that trust proxies (trusted_proxies)
// without trusted_proxies_strict: their client_ip is the left-most X-Forwarded-For address, which
// a client behind an appending proxy writes itself, so the IP limit and the demo sign-in's
// loopback check can be dodged (README, "Behind a CDN or load balancer"). It runs at every Start.
func (a *App) warnLooseProxies(ctx caddy.Context) {
	app := httpApp(ctx)
	if app == nil {
		return
	}
	var loose []string
	for name, srv := range app.Servers {
		if srv.TrustedProxiesStrict == 0 && trustsProxies(srv) {
			loose = append(loose, name)
		}
	}
	if len(loose) == 0 {
		return
	}
	slices.Sort(loose)
	a.logger.Warn("trusted_proxies without trusted_proxies_strict: client_ip is the left-most X-Forwarded-For "+
		"address, which a client behind a proxy that appends to the header writes itself, so it can dodge the IP "+
		"limit; set trusted_proxies_strict in the servers block",
		zap.Strings("servers", loose))
}

// trustsProxies reports whether srv has trusted_proxies. Provisioning loads the module into an
// unexported field and clears TrustedProxiesRaw, so at Start only reflection can see it; a Caddy
// that renamed the field answers false, and TestIPLimitBehindAppendingProxy fails.
func trustsProxies(srv *caddyhttp.Server) bool {
	if srv.TrustedProxiesRaw != nil {
		return true
	}
	f := reflect.ValueOf(srv).Elem().FieldByName("trustedProxies")
	return f.IsValid() && f.Kind() == reflect.Interface && !f.IsNil()
}

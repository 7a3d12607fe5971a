package caddymodule

import (
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestWarnFallbackSecrets checks the start-up warning: none while every listener is local (a
// loopback address, localhost, a Unix socket), one naming the secrets and only the exposed
// listeners otherwise, and none without a fallback secret.
func TestWarnFallbackSecrets(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	a := &App{logger: zap.New(core),
		fallback: fallbackSecrets([]byte("dev-only-jwt-secret-do-not-deploy"), []byte("a-real-secret"), nil)}
	if !slices.Equal(a.fallback, []string{secretJWT}) {
		t.Fatalf("fallback secrets %v, want [jwt]", a.fallback)
	}

	a.warnFallbackSecrets([]string{"127.0.0.1:8080", "[::1]:8081", "localhost:8082", "unix//run/caddy.sock"})
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d warnings for local listeners only: %v", n, logs.All())
	}

	a.warnFallbackSecrets([]string{":8080", "127.0.0.1:8081", "tcp/10.0.0.5:443", "shop.example.com:80"})
	all := logs.TakeAll()
	if len(all) != 1 {
		t.Fatalf("%d warnings, want 1: %v", len(all), all)
	}
	f := all[0].ContextMap()
	if got := f["listeners"]; !slices.Equal(toStrings(got), []string{":8080", "tcp/10.0.0.5:443", "shop.example.com:80"}) {
		t.Errorf("listeners %v, want the three beyond loopback", got)
	}
	if got := f["secrets"]; !slices.Equal(toStrings(got), []string{secretJWT}) {
		t.Errorf("secrets %v, want [jwt]", got)
	}

	a.fallback = fallbackSecrets([]byte("a-real-jwt-secret"), []byte("a-real-url-secret"), []byte("a-real-forward-secret"))
	a.warnFallbackSecrets([]string{":8080"})
	if n := logs.Len(); n != 0 {
		t.Errorf("%d warnings without a fallback secret: %v", n, logs.All())
	}
}

func toStrings(v any) []string {
	switch s := v.(type) {
	case []string:
		return s
	case []any:
		out := make([]string, len(s))
		for i, e := range s {
			out[i], _ = e.(string)
		}
		return out
	}
	return nil
}

package caddymodule_test

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"testing"
)

// exampleFallback returns the fallback Caddyfile.example gives the environment variable name.
func exampleFallback(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`\{\$` + name + `:([^}]+)\}`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("Caddyfile.example has no {$%s:<fallback>}", name)
	}
	return string(m[1])
}

// TestFallbackSecretMetric runs Caddy with Caddyfile.example's fallback secrets: on a listener of
// every interface, caddy_seckill_fallback_secret is 1 for jwt and url; bound to 127.0.0.1, or
// with secrets of one's own, it is 0.
func TestFallbackSecretMetric(t *testing.T) {
	jwtFallback, urlFallback := exampleFallback(t, "SECKILL_JWT_SECRET"), exampleFallback(t, "SECKILL_URL_SECRET")
	for _, tc := range []struct {
		name, bind, jwt, url string
		want                 float64
	}{
		{"fallbacks on every interface", "", jwtFallback, urlFallback, 1},
		{"fallbacks on loopback", "bind 127.0.0.1", jwtFallback, urlFallback, 0},
		{"own secrets", "", "own-jwt-secret-0123456789abcdefghij", "own-url-secret", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			runCaddyfile(t, fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		level ERROR
	}
	seckill {
		jwt {
			algorithms HS256
			hmac_secret %s
		}
		url_secret %s
		captcha off
	}
}

http://:%d {
	%s
	metrics /metrics
}
`, t.TempDir(), tc.jwt, tc.url, port, tc.bind))
			r := newClient(t, fmt.Sprintf("http://127.0.0.1:%d", port)).Get("/metrics", "")
			if r.Status != http.StatusOK {
				t.Fatalf("metrics: %s", r)
			}
			for secret, want := range map[string]float64{"jwt": tc.want, "url": tc.want, "forward": 0} {
				series := `caddy_seckill_fallback_secret{secret="` + secret + `"}`
				if got := metricValue(t, string(r.Raw), series); got != want {
					t.Errorf("%s = %v, want %v", series, got, want)
				}
			}
		})
	}
}

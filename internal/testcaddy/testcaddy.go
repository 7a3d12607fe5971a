// Package testcaddy runs Caddy with a seckill sale for the tests of caddymodule and seckillcmd,
// and talks to it: the one place where those tests start Caddy in their own process (RunCaddyfile,
// StartCaddy, StartSale...), the cmd/caddy binary for the tests that need a second process or the
// command line (BuildCaddy), the Caddyfile blocks of a test sale, tokens, an HTTP client, and the
// admin API. Caddy's state is global: tests that start it must not run in parallel.
package testcaddy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	// What a test Caddy runs: the standard modules (and the Caddyfile adapter), the seckill app
	// and handlers, and the store and payment modules, as the root package registers them for a
	// Caddy build.
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/caddy-seckill/caddy-seckill/admission/localstore"
	_ "github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	_ "github.com/caddy-seckill/caddy-seckill/caddymodule"
	_ "github.com/caddy-seckill/caddy-seckill/payments/mockpay"
	_ "github.com/caddy-seckill/caddy-seckill/payments/stripepay"
)

// JWTSecret is the HS256 secret of every test sale.
var JWTSecret = []byte("test-jwt-secret-0123456789abcdef")

// JWTBlock is the seckill app's jwt block for JWTSecret.
const JWTBlock = "jwt {\n\talgorithms HS256\n\thmac_secret test-jwt-secret-0123456789abcdef\n}\n"

// Route is the site body that serves the seckill handler under /seckill/.
const Route = "route /seckill/* {\n\tseckill\n}\n"

// OrdersSite serves the edge, the embedded order API, the demo sign-in and the metrics.
const OrdersSite = Route + "route /orders/* {\n\tseckill_orders\n}\n" +
	"route /demo/token {\n\tseckill_demo_signin\n}\nmetrics /metrics\n"

// PayWindow is the test activities' pay_within: short, so that an unpaid order expires within the
// test, yet long enough for a buyer who pays at once.
const PayWindow = 5 * time.Second

// RFC3339 formats t as the Caddyfile wants it.
func RFC3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// ActivityBlock is the Caddyfile block of one activity.
func ActivityBlock(id string, stock, limit int, start, end time.Time, reveal time.Duration) string {
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tlimit %d\n\tstart %s\n\tend %s\n\treveal %s\n}\n",
		id, stock, limit, RFC3339(start), RFC3339(end), reveal)
}

// SaleBlock is the Caddyfile block of an activity open now with the test's payment window.
func SaleBlock(id string, stock int) string {
	now := time.Now()
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tlimit 1\n\tstart %s\n\tend %s\n\tpay_within %s\n}\n",
		id, stock, RFC3339(now.Add(-time.Minute)), RFC3339(now.Add(time.Hour)), PayWindow)
}

// OrdersOption runs the embedded order backend on db ("sqlite <file>" or "postgres <dsn>") with a
// quick sweeper.
func OrdersOption(db string) string {
	return "orders " + db + " {\n\tsweep_every 200ms\n\tconsumer_name test-node\n}\n"
}

// Token mints an HS256 token for user, valid for an hour.
func Token(t testing.TB, user string) string {
	t.Helper()
	return SignToken(t, jwt.SigningMethodHS256, JWTSecret, jwt.MapClaims{
		"sub": user, "exp": time.Now().Add(time.Hour).Unix(),
	})
}

// SignToken signs claims with m and key.
func SignToken(t testing.TB, m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ECKeyFile writes a fresh ECDSA P-256 public key as PEM and returns the file name.
func ECKeyFile(t testing.TB) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "es256.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

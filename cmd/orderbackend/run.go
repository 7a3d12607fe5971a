package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/jwtauth"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
	"github.com/caddy-seckill/caddy-seckill/payments/mockpay"
	"github.com/caddy-seckill/caddy-seckill/payments/stripepay"
	"github.com/caddy-seckill/caddy-seckill/payments/webhookpay"
)

func cmdRun(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("orderbackend run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c         common
		listen    = fs.String("listen", env("SECKILL_ORDERS_LISTEN", ":8081"), "address of the order API [SECKILL_ORDERS_LISTEN]")
		name      = fs.String("name", env("SECKILL_CONSUMER_NAME", ""), "consumer name, stable across restarts and distinct per process; default the host name [SECKILL_CONSUMER_NAME]")
		algs      = fs.String("jwt-algorithms", env("SECKILL_JWT_ALGORITHMS", "HS256"), "accepted JWT algorithms, comma-separated [SECKILL_JWT_ALGORITHMS]")
		secretEnv = fs.String("jwt-secret-env", "SECKILL_JWT_SECRET", "name of the environment variable holding the HMAC secret")
		pemFile   = fs.String("jwt-public-key-file", env("SECKILL_JWT_PUBLIC_KEY_FILE", ""), "PEM public key(s) for RS/PS/ES/EdDSA tokens [SECKILL_JWT_PUBLIC_KEY_FILE]")
		jwksURL   = fs.String("jwks-url", env("SECKILL_JWKS_URL", ""), "JWKS endpoint [SECKILL_JWKS_URL]")
		jwksMin   = fs.Duration("jwks-min-refresh", envDuration("SECKILL_JWKS_MIN_REFRESH", jwtauth.DefaultJWKSMinRefresh), "least time between two JWKS fetches (a token with an unknown kid asks for one) [SECKILL_JWKS_MIN_REFRESH]")
		issuer    = fs.String("jwt-issuer", env("SECKILL_JWT_ISSUER", ""), "required iss claim, if set [SECKILL_JWT_ISSUER]")
		audience  = fs.String("jwt-audience", env("SECKILL_JWT_AUDIENCE", ""), "required aud claim, if set [SECKILL_JWT_AUDIENCE]")
		leeway    = fs.Duration("jwt-leeway", 30*time.Second, "clock skew tolerated on exp/nbf/iat")
		maxDeliv  = fs.Int64("max-deliveries", 5, "deliveries after which a failing win is dead-lettered")
		claimIdle = fs.Duration("claim-idle", 30*time.Second, "a win pending this long belongs to a dead consumer and is claimed")
		linger    = fs.Duration("linger", 0, "how long a consumer of a busy queue waits for more wins before a transaction; 0 is the default (10ms), negative turns it off")
	)
	// A listener of its own: the order API faces clients, metrics and profiles must not.
	metricsAddr := fs.String("metrics-listen", env("SECKILL_ORDERS_METRICS_LISTEN", ""),
		"address serving /metrics (Prometheus) and /debug/pprof/ to operators; empty is off. Not the order API's listener: "+
			"that one faces clients, and metrics and profiles must not, so keep this on a private interface [SECKILL_ORDERS_METRICS_LISTEN]")
	c.register(fs)
	prices := listings{}
	prices.register(fs)
	provider := fs.String("payments", env("SECKILL_PAYMENTS", "mock"), "payment provider: mock (accepts every charge, takes no money: a demo), "+
		"stripe (pay calls carry {\"payment_method\":\"pm_...\"}) or webhook (the shop's payment service at -webhook-url, "+
		"confirming by signed notifications) [SECKILL_PAYMENTS]")
	stripeKeyEnv := fs.String("stripe-secret-env", "STRIPE_SECRET_KEY", "name of the environment variable holding the Stripe secret key (-payments stripe)")
	stripeBase := fs.String("stripe-api-base", env("STRIPE_API_BASE", ""), "Stripe API base URL (-payments stripe); default "+stripepay.DefaultAPIBase+" [STRIPE_API_BASE]")
	stripeWhsecEnv := fs.String("stripe-webhook-secret-env", "STRIPE_WEBHOOK_SECRET", "name of the environment variable holding the signing secret "+
		"of the Stripe webhook endpoint that points at /orders/webhooks/stripe (-payments stripe); unset refuses Stripe's notifications")
	stripeTolerance := fs.Duration("stripe-webhook-tolerance", stripepay.DefaultWebhookTolerance, "how old a Stripe webhook's signature may be (-payments stripe)")
	webhookURL := fs.String("webhook-url", env("SECKILL_WEBHOOK_URL", ""), "the shop's payment service (-payments webhook) [SECKILL_WEBHOOK_URL]")
	webhookSecretEnv := fs.String("webhook-secret-env", "SECKILL_WEBHOOK_SECRET", "name of the environment variable holding the secret that signs "+
		"every message with the shop's payment service, 16 bytes or more (-payments webhook)")
	webhookTolerance := fs.Duration("webhook-tolerance", webhookpay.DefaultTolerance, "how far a signature's time may be from this clock (-payments webhook)")
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	log, err := zap.NewProduction()
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
		return exitError
	}
	var payments orderbackend.Payments
	switch *provider {
	case "mock":
		payments = new(mockpay.Provider)
	case "stripe":
		m := stripepay.Module{SecretKey: os.Getenv(*stripeKeyEnv), APIBase: *stripeBase,
			WebhookSecret: os.Getenv(*stripeWhsecEnv), WebhookTolerance: caddy.Duration(*stripeTolerance)}
		if err := m.Provision(caddy.Context{}); err != nil {
			_, _ = fmt.Fprintf(stderr, "orderbackend: -payments stripe (key from $%s, webhook secret from $%s): %v\n", *stripeKeyEnv, *stripeWhsecEnv, err)
			return exitError
		}
		if payments, err = m.OpenPayments(log); err != nil {
			_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
			return exitError
		}
	case "webhook":
		m := webhookpay.Module{URL: *webhookURL, Secret: os.Getenv(*webhookSecretEnv), Tolerance: caddy.Duration(*webhookTolerance)}
		if err := m.Provision(caddy.Context{}); err != nil {
			_, _ = fmt.Fprintf(stderr, "orderbackend: -payments webhook (-webhook-url, secret from $%s): %v\n", *webhookSecretEnv, err)
			return exitError
		}
		if payments, err = m.OpenPayments(log); err != nil {
			_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
			return exitError
		}
	default:
		_, _ = fmt.Fprintf(stderr, "orderbackend: -payments %q: want mock, stripe or webhook\n", *provider)
		return exitError
	}
	defer log.Sync() //nolint:errcheck // nothing to do about a failed flush at exit

	// The metrics listener is bound first, so that a bad address fails before anything connects.
	var metricsLn net.Listener
	if *metricsAddr != "" {
		if metricsLn, err = net.Listen("tcp", *metricsAddr); err != nil {
			_, _ = fmt.Fprintf(stderr, "orderbackend: -metrics-listen %q: %v\n", *metricsAddr, err)
			return exitError
		}
		defer metricsLn.Close() //nolint:errcheck // closed by Shutdown on the way out; this covers the early returns
	}
	cfg := jwtauth.Config{
		Algorithms: strings.Split(*algs, ","), HMACSecret: []byte(os.Getenv(*secretEnv)),
		JWKSURL: *jwksURL, Issuer: *issuer, Audience: *audience, Leeway: *leeway,
		JWKSMinRefresh: *jwksMin, Logger: log.Named("jwt"),
	}
	if *pemFile != "" {
		pem, err := os.ReadFile(*pemFile)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
			return exitError
		}
		cfg.PublicKeyPEM = [][]byte{pem}
	}
	verifier, err := jwtauth.New(cfg)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
		return exitError
	}
	store, repo, err := c.open(ctx)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
		return exitError
	}
	defer func() { _ = store.Close(); _ = repo.Close() }()

	b, err := orderbackend.New(orderbackend.Config{
		Store: store, Repo: repo, Auth: orderbackend.JWT(verifier), Name: *name, Logger: log,
		Payments: payments,
		Consumer: orderbackend.ConsumerOptions{MaxDeliveries: *maxDeliv, ClaimIdle: *claimIdle, Linger: *linger, Listing: prices.listing},
	})
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend:", err)
		return exitError
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "orderbackend: -listen %q: %v\n", *listen, err)
		return exitError
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("order backend running", zap.String("listen", ln.Addr().String()))
	var metricsSrv *http.Server
	if metricsLn != nil {
		metricsSrv = metricsServer(b)
		go func() {
			// A failed metrics listener is logged, not fatal: the backend keeps making orders.
			if err := metricsSrv.Serve(metricsLn); !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics listener stopped", zap.Error(err))
			}
		}()
		log.Info("metrics and profiles (/metrics, /debug/pprof/)", zap.String("metrics_listen", metricsLn.Addr().String()))
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.Run(runCtx) }()

	code := exitOK
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		log.Error("order api stopped", zap.Error(err))
		code = exitError
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("order api shutdown", zap.Error(err))
	}
	if metricsSrv != nil {
		// A scrape in flight gets a second; a CPU profile or a trace in flight is cut short by
		// Close rather than holding the exit up for its seconds.
		graceCtx, cancelGrace := context.WithTimeout(context.Background(), time.Second)
		if err := metricsSrv.Shutdown(graceCtx); err != nil {
			_ = metricsSrv.Close()
		}
		cancelGrace()
	}
	cancel()
	<-done
	log.Info("order backend stopped", zap.Any("metrics", b.Metrics()))
	return code
}

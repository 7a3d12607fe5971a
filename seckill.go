// Package seckill is caddy-seckill, a Caddy v2 plugin that runs the defensive funnel of a flash
// sale at the edge. Importing this package registers its Caddy modules, so that
//
//	xcaddy build --with github.com/caddy-seckill/caddy-seckill
//
// builds a Caddy with the seckill app and handler (package caddymodule), the admission stores
// they choose from (the guest modules seckill.stores.memory, .local and .redis), the payment
// providers of the embedded order backend (seckill.payments.mock, the default, and .stripe)
// and the `caddy seckill` command (package caddymodule/seckillcmd).
package seckill

import (
	// Registers the seckill app, the http.handlers.seckill handler and their Caddyfile syntax.
	_ "github.com/caddy-seckill/caddy-seckill/caddymodule"

	// Registers the `caddy seckill` command (token, status, reconcile, watch).
	_ "github.com/caddy-seckill/caddy-seckill/caddymodule/seckillcmd"

	// Register the store modules seckill.stores.memory and seckill.stores.local, and
	// seckill.stores.redis.
	_ "github.com/caddy-seckill/caddy-seckill/admission/localstore"
	_ "github.com/caddy-seckill/caddy-seckill/admission/redisstore"

	// Register the payment providers seckill.payments.mock, seckill.payments.stripe and
	// seckill.payments.webhook.
	_ "github.com/caddy-seckill/caddy-seckill/payments/mockpay"
	_ "github.com/caddy-seckill/caddy-seckill/payments/stripepay"
	_ "github.com/caddy-seckill/caddy-seckill/payments/webhookpay"
)

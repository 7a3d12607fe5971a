package caddymodule

import (
	// The store and payment modules, which the root package registers for a Caddy build.
	_ "github.com/caddy-seckill/caddy-seckill/admission/localstore"
	_ "github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	_ "github.com/caddy-seckill/caddy-seckill/payments/mockpay"
	_ "github.com/caddy-seckill/caddy-seckill/payments/stripepay"
	_ "github.com/caddy-seckill/caddy-seckill/payments/webhookpay"
)

package caddymodule

import (
	// The store modules, which the root package registers for a Caddy build.
	_ "github.com/caddy-seckill/caddy-seckill/admission/localstore"
	_ "github.com/caddy-seckill/caddy-seckill/admission/redisstore"
)

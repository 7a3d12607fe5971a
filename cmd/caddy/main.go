// Command caddy is Caddy with the standard modules and caddy-seckill, for `go run` and for
// deployments that do not use xcaddy:
//
//	go run ./cmd/caddy run --config Caddyfile.example --adapter caddyfile
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	// The standard Caddy modules.
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	// caddy-seckill.
	_ "github.com/caddy-seckill/caddy-seckill"
)

func main() {
	caddycmd.Main()
}

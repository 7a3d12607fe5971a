#!/usr/bin/env bash
# Builds Caddy with this plugin the way users do (xcaddy) and checks that the modules are there.
# The module is not published from this checkout, so the plugin is named with a placeholder
# version (@v0.0.0) and replaced by the checkout: `go get` then needs no proxy look-up for it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:$(go env GOPATH)/bin"
command -v xcaddy >/dev/null 2>&1 || go install github.com/caddyserver/xcaddy/cmd/xcaddy@v0.4.5
caddy_version=$(go list -m -f '{{.Version}}' github.com/caddyserver/caddy/v2)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
xcaddy build "$caddy_version" --with "github.com/caddy-seckill/caddy-seckill@v0.0.0=$PWD" --output "$out/caddy" >"$out/build.log" 2>&1 || {
	tail -40 "$out/build.log" >&2
	exit 1
}
mods=$("$out/caddy" list-modules)
status=0
for m in seckill http.handlers.seckill http.handlers.seckill_orders admin.api.seckill \
	seckill.stores.memory seckill.stores.local seckill.stores.redis seckill.payments.mock seckill.payments.stripe; do
	if grep -qx "$m" <<<"$mods"; then
		echo "xcaddy build: module $m present"
	else
		echo "xcaddy build: module $m MISSING" >&2
		status=1
	fi
done
exit $status

// Package web holds the sale page: a static page (index.html, style.css and ES modules, no build
// step) that Caddy's file_server serves in front of the seckill handler. It counts down on the
// gateway's clock (server_time_ms), fetches the hashed buy path at the opening instant, buys with
// an Idempotency-Key, polls the result with backoff and jitter, and pays the order.
//
// The files are embedded so that a Go program or a test can serve them without the source tree.
// The package's tests run the page in headless Chromium against a real gateway built from
// cmd/caddy; scripts/ensure-chromium.sh installs the browser.
package web

import "embed"

// Files is the sale page: index.html and the files it loads.
//
//go:embed index.html style.css *.js
var Files embed.FS

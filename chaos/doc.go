// Package chaos is the chaos suite of caddy-seckill: real Caddy gateways and real order
// backends, built from this module, on a private redis-server (AOF, appendfsync everysec) and a
// private PostgreSQL, while the test kills, pauses and stops them mid-sale.
//
// Every scenario ends with orderbackend.Reconcile passing and with the promises checked from the
// buyers' side: every reservation a buyer got a 202 for is exactly one order (no win lost), no
// Idempotency-Key is admitted twice, and no user or activity is oversold.
//
// The package holds tests only. `go test ./chaos/` runs the short version (what CI runs); set
// SECKILL_CHAOS=full (`make chaos`) for bigger sales, the 30 s PostgreSQL outage and more rounds;
// -short skips the package. docs/CHAOS.md describes each scenario.
package chaos

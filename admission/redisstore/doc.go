// Package redisstore is the admission store for any number of gateways: the stock, the buyers,
// the idempotency answers, the results and the wins queue of every activity live in Redis (one
// server, a Sentinel set or a Cluster), and each admission is one Lua script (lua/*.lua, each with
// its KEYS, ARGV and Reply). Concurrent buys of one activity share one script call (group
// admission), and an activity may be split into stock buckets on several Cluster shards.
// docs/admission.md has the design; package admissiontest is the contract it passes.
package redisstore

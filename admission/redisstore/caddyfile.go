package redisstore

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/internal/caddyfileargs"
)

// UnmarshalCaddyfile sets up the module from the store option of the global seckill block.
// Syntax:
//
//	store redis [<host:port>...] [{   # shared by every node; /path/redis.sock for a Unix socket
//		address      <host:port>...     # the server; or the nodes (cluster), the sentinels (sentinel)
//		username     <acl user>
//		password     <password>         # {env.REDIS_PASSWORD} is fine
//		db           <n>                # not with cluster
//		key_prefix   <prefix>           # default seckill
//		sentinel     <master name>
//		cluster
//		auto_pipeline                   # go-redis auto-pipelining of concurrent calls; experimental
//		admit_batch  <n>                # buys per admission script call; default 64; 1 (no grouping) to 1024
//		pool_size    <n>                # connections per server; default max(64, 10 × GOMAXPROCS)
//		replicas_ack <n> [<timeout>]    # n replicas (1 to 16) confirm each win; timeout ≤ 500ms, default 100ms
//		rebalance_interval <duration>   # levelling of split activities; default 250ms; 10ms to 10m
//	}]
//
// address may be given several times: the addresses add up. Every other option may be given once.
func (m *Module) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the store's name
	m.Addresses = append(m.Addresses, d.RemainingArgs()...)
	err := caddyfileargs.ParseBlock(d, "seckill", "store redis ", func(opt string) (err error) {
		switch opt {
		case "address":
			err = caddyfileargs.AppendArgs(d, &m.Addresses)
		case "username":
			m.Username, err = caddyfileargs.OneArg(d)
		case "password":
			m.Password, err = caddyfileargs.OneArg(d)
		case "db":
			m.DB, err = caddyfileargs.IntArg(d, "store redis db", 0, math.MaxInt, "want a database number")
		case "key_prefix":
			if m.KeyPrefix, err = caddyfileargs.OneArg(d); err == nil && strings.ContainsAny(m.KeyPrefix, "{}") {
				err = d.Errf("seckill: store redis key_prefix %q: %s", m.KeyPrefix, errPrefixBrace)
			}
		case "sentinel":
			m.SentinelMaster, err = caddyfileargs.OneArg(d)
		case "cluster":
			m.Cluster, err = true, caddyfileargs.NoArg(d)
		case "auto_pipeline":
			m.AutoPipeline, err = true, caddyfileargs.NoArg(d)
		case "admit_batch":
			m.AdmitBatch, err = caddyfileargs.IntArg(d, "store redis admit_batch", 1, MaxAdmitBatch,
				fmt.Sprintf("want 1 (no grouping) to %d", MaxAdmitBatch))
		case "pool_size":
			m.PoolSize, err = caddyfileargs.IntArg(d, "store redis pool_size", 1, maxPoolSize,
				fmt.Sprintf("want 1 to %d connections", maxPoolSize))
		case "replicas_ack":
			err = m.parseReplicasAck(d)
		case "rebalance_interval":
			m.RebalanceInterval, err = caddyfileargs.PositiveDurationArg(d, "store redis rebalance_interval")
		default:
			err = d.Errf("seckill: unrecognized store redis option %q", opt)
		}
		return err
	}, "address")
	if err != nil {
		return err
	}
	if len(m.Addresses) == 0 {
		return d.Err("seckill: store redis needs at least one address")
	}
	if err := m.validate(); err != nil {
		return d.Errf("seckill: %v", err)
	}
	return nil
}

// parseReplicasAck parses "replicas_ack <n> [<timeout>]": n replicas (1 to MaxReplicasAck) must
// confirm each admission call and release within timeout (default 100ms, 1ms to
// maxAckTimeout), else its buyers are answered 503 busy.
func (m *Module) parseReplicasAck(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > MaxReplicasAck {
		return d.Errf("seckill: store redis replicas_ack %q: want 1 to %d replicas", args[0], MaxReplicasAck)
	}
	m.ReplicasAck = n
	if len(args) == 2 {
		t, err := caddy.ParseDuration(args[1])
		if err != nil || t < time.Millisecond || t > maxAckTimeout {
			return d.Errf("seckill: store redis replicas_ack timeout %q: want 1ms to %v", args[1], maxAckTimeout)
		}
		m.ReplicasAckTimeout = caddy.Duration(t)
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*Module)(nil)

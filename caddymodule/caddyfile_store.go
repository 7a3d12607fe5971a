package caddymodule

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
)

// parseStore parses the store option of the global seckill block. Syntax:
//
//	store memory
//	store local <dir> {
//		fsync always|no
//	}
//	store redis [<address>...] {
//		address    <host:port>...
//		username   <name>
//		password   <password>
//		db         <n>
//		key_prefix <prefix>
//		sentinel   <master name>
//		cluster
//		auto_pipeline
//		admit_batch <n>
//		pool_size   <n>
//		replicas_ack <n> [<timeout>]
//		rebalance_interval <duration>
//	}
func parseStore(d *caddyfile.Dispenser) (*StoreConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	s := &StoreConfig{Type: d.Val()}
	var err error
	switch s.Type {
	case storeMemory:
		err = parseStoreMemory(d)
	case storeLocal:
		err = parseStoreLocal(d, s)
	case storeRedis:
		err = parseStoreRedis(d, s)
	default:
		return nil, d.Errf("seckill: unknown store %q: want memory, local or redis", s.Type)
	}
	if err != nil {
		return nil, err
	}
	if err := s.validate(); err != nil {
		return nil, d.Errf("seckill: %v", err)
	}
	return s, nil
}

// parseStoreMemory parses the rest of "store memory", which takes neither arguments nor options.
func parseStoreMemory(d *caddyfile.Dispenser) error {
	if err := noArg(d); err != nil {
		return err
	}
	if d.NextBlock(d.Nesting()) {
		return d.Err("seckill: store memory takes no options")
	}
	return nil
}

// parseStoreLocal parses the rest of "store local <dir> [{ fsync always|no }]".
func parseStoreLocal(d *caddyfile.Dispenser, s *StoreConfig) error {
	if !d.AllArgs(&s.Dir) {
		return d.Err("seckill: want store local <folder>, e.g. store local ./seckill-data")
	}
	return parseBlock(d, "seckill", "store local ", func(opt string) (err error) {
		switch opt {
		case "fsync":
			s.Fsync, err = oneArg(d)
			if err == nil && s.Fsync != fsyncAlways && s.Fsync != fsyncNo {
				err = d.Errf("seckill: store local fsync %q: want always (flush to the device: survives a "+
					"power loss) or no (the default: survives a crash of the process)", s.Fsync)
			}
		default:
			err = d.Errf("seckill: unrecognized store local option %q", opt)
		}
		return err
	})
}

// parseStoreRedis parses the rest of "store redis [<address>...] [{ ... }]" (see parseStore).
// address may be given several times: the addresses add up.
func parseStoreRedis(d *caddyfile.Dispenser, s *StoreConfig) error {
	s.Addresses = append(s.Addresses, d.RemainingArgs()...)
	err := parseBlock(d, "seckill", "store redis ", func(opt string) (err error) {
		switch opt {
		case "address":
			err = appendArgs(d, &s.Addresses)
		case "username":
			s.Username, err = oneArg(d)
		case "password":
			s.Password, err = oneArg(d)
		case "db":
			s.DB, err = intArg(d, "store redis db", 0, math.MaxInt, "want a database number")
		case "key_prefix":
			s.KeyPrefix, err = oneArg(d)
		case "sentinel":
			s.SentinelMaster, err = oneArg(d)
		case "cluster":
			s.Cluster, err = true, noArg(d)
		case "auto_pipeline":
			s.AutoPipeline, err = true, noArg(d)
		case "admit_batch":
			s.AdmitBatch, err = intArg(d, "store redis admit_batch", 1, redisstore.MaxAdmitBatch,
				fmt.Sprintf("want 1 (no grouping) to %d", redisstore.MaxAdmitBatch))
		case "pool_size":
			s.PoolSize, err = intArg(d, "store redis pool_size", 1, maxPoolSize,
				fmt.Sprintf("want 1 to %d connections", maxPoolSize))
		case "replicas_ack":
			err = parseReplicasAck(d, s)
		case "rebalance_interval":
			s.RebalanceInterval, err = positiveDurationArg(d, "store redis rebalance_interval")
		default:
			err = d.Errf("seckill: unrecognized store redis option %q", opt)
		}
		return err
	}, "address")
	if err != nil {
		return err
	}
	if len(s.Addresses) == 0 {
		return d.Err("seckill: store redis needs at least one address")
	}
	return nil
}

// parseReplicasAck parses the store redis option
//
//	replicas_ack <n> [<timeout>]
//
// n replicas (1 to 16) must confirm each admission call and release within timeout (default
// 100ms, 1ms to 500ms), else its buyers are answered 503 busy.
func parseReplicasAck(d *caddyfile.Dispenser, s *StoreConfig) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > redisstore.MaxReplicasAck {
		return d.Errf("seckill: store redis replicas_ack %q: want 1 to %d replicas", args[0], redisstore.MaxReplicasAck)
	}
	s.ReplicasAck = n
	if len(args) == 2 {
		t, err := caddy.ParseDuration(args[1])
		if err != nil || t < time.Millisecond || t > maxReplicasAckTimeout {
			return d.Errf("seckill: store redis replicas_ack timeout %q: want 1ms to %v", args[1], maxReplicasAckTimeout)
		}
		s.ReplicasAckTimeout = caddy.Duration(t)
	}
	return nil
}

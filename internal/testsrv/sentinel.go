package testsrv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the sentinels of a Sentinel set monitor their master under.
const SentinelMaster = "seckill"

// Sentinel is a private Sentinel set: a master, its replica and three sentinels (quorum 2), each
// server in its own temporary folder on free loopback ports.
type Sentinel struct {
	t         testing.TB
	Servers   []*Redis // Servers[0] started as the master, Servers[1] as its replica
	Sentinels []*Redis

	// DownAfter is the sentinels' down-after-milliseconds: how long the master must be unreachable
	// before they agree it is down and fail over.
	DownAfter time.Duration
}

// SentinelOption adjusts a Sentinel set.
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	downAfter, failoverTimeout time.Duration
	redis                      []RedisOption
}

// WithDownAfter sets down-after-milliseconds (default 2 s).
func WithDownAfter(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.downAfter = d }
}

// WithFailoverTimeout sets failover-timeout (default 10 s): how long before a failed failover is
// tried again, and the pace of reconfiguring replicas.
func WithFailoverTimeout(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.failoverTimeout = d }
}

// WithServerOptions applies redis-server options (WithAOF, WithArgs) to the master and replica.
func WithServerOptions(opts ...RedisOption) SentinelOption {
	return func(c *sentinelConfig) { c.redis = append(c.redis, opts...) }
}

// StartSentinel starts the master, its replica (in sync before the sentinels start) and three
// sentinels, and waits until every sentinel knows the replica and the two other sentinels, so a
// failover can happen at once. Everything stops with t.Cleanup.
func StartSentinel(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	cfg := sentinelConfig{downAfter: 2 * time.Second, failoverTimeout: 10 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	extra := redisArgs(cfg.redis)
	s := &Sentinel{t: t, DownAfter: cfg.downAfter}
	master := StartRedis(t, WithArgs(extra...))
	host, port, _ := net.SplitHostPort(master.Addr)
	replica := StartRedis(t, WithArgs(append([]string{"--replicaof", host, port}, extra...)...))
	s.Servers = []*Redis{master, replica}
	ctx, cancel := context.WithTimeout(context.Background(), clusterSetupTimeout)
	defer cancel()
	// In sync: it applies the master's writes, not only reports its link up (WaitStreaming).
	if err := replica.WaitStreaming(master, clusterSetupTimeout); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		dir := t.TempDir()
		s.Sentinels = append(s.Sentinels, startRedis(t, dir, func(int) (first, last []string, err error) {
			// A sentinel rewrites its config file: it must be its own, writable.
			conf := filepath.Join(dir, "sentinel.conf")
			body := fmt.Sprintf("sentinel monitor %s %s %s 2\n"+
				"sentinel down-after-milliseconds %[1]s %[4]d\n"+
				"sentinel failover-timeout %[1]s %[5]d\n",
				SentinelMaster, host, port, cfg.downAfter.Milliseconds(), cfg.failoverTimeout.Milliseconds())
			if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
				return nil, nil, err
			}
			return []string{conf, "--sentinel"}, nil, nil
		}))
	}
	if err := poll(ctx, "every sentinel to know the replica and the other sentinels", func() (bool, error) {
		for _, sn := range s.Sentinels {
			cl := sn.sentinelClient()
			reps, err1 := cl.Replicas(ctx, SentinelMaster).Result()
			sens, err2 := cl.Sentinels(ctx, SentinelMaster).Result()
			_ = cl.Close()
			if err1 != nil || err2 != nil || len(reps) != 1 || len(sens) != 2 {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// Addrs returns the sentinels' addresses, what a client is given.
func (s *Sentinel) Addrs() []string { return addrs(s.Sentinels) }

// Server returns the master or replica listening on addr, or nil.
func (s *Sentinel) Server(addr string) *Redis { return byAddr(s.Servers, addr) }

// Master returns the server the running sentinels name as master (the first that answers).
func (s *Sentinel) Master() *Redis {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, sn := range s.Sentinels {
		if addr, err := sn.masterAddr(ctx); err == nil {
			if m := s.Server(addr); m != nil {
				return m
			}
		}
	}
	s.t.Fatal("no sentinel names the master")
	return nil
}

// WaitFailover waits until every running sentinel names another master than old and that server
// reports role:master; it returns the new master and how long the wait took.
func (s *Sentinel) WaitFailover(old *Redis, timeout time.Duration) (*Redis, time.Duration) {
	s.t.Helper()
	return waitPromoted(s.t, "the sentinels to promote a replica of "+old.Addr, timeout, old, s.Sentinels, s.Servers,
		func(ctx context.Context, sn *Redis) (string, error) { return sn.masterAddr(ctx) })
}

// WaitReplicaOf waits until r (an old master, restarted) has been turned into a replica of master
// by the sentinels and applies its writes (WaitStreaming: link up is not enough, and a master
// killed in the second after the resync would take every write it answered since with it).
func (s *Sentinel) WaitReplicaOf(r, master *Redis, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	host, port, _ := net.SplitHostPort(master.Addr)
	if err := poll(ctx, r.Addr+" to replicate "+master.Addr, func() (bool, error) {
		repl, err := r.cmd1(ctx, "INFO", "replication")
		return err == nil && strings.Contains(repl, "role:slave") && strings.Contains(repl, "master_host:"+host+"\r\n") &&
			strings.Contains(repl, "master_port:"+port+"\r\n") && strings.Contains(repl, "master_link_status:up"), nil
	}); err != nil {
		s.t.Fatal(err)
	}
	if err := r.WaitStreaming(master, time.Until(deadline)); err != nil {
		s.t.Fatal(err)
	}
}

func (r *Redis) sentinelClient() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1})
}

// masterAddr asks this sentinel for the master's address.
func (r *Redis) masterAddr(ctx context.Context) (string, error) {
	cl := r.sentinelClient()
	defer func() { _ = cl.Close() }()
	hp, err := cl.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	if len(hp) != 2 {
		return "", fmt.Errorf("%s: master address %v", r.Addr, hp)
	}
	if _, err := strconv.Atoi(hp[1]); err != nil {
		return "", fmt.Errorf("%s: master port %q", r.Addr, hp[1])
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

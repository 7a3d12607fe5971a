package testsrv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/clusterslot"
)

// Cluster is a private Redis Cluster of three masters and one replica each, on free loopback
// ports (client and bus), each node in its own temporary folder. It needs redis-server 7.0 or
// later (cluster-port, CLUSTER ADDSLOTSRANGE and CLUSTER SHARDS).
type Cluster struct {
	t     testing.TB
	Nodes []*Redis // Nodes[0:3] started as masters, Nodes[3:6] as their replicas

	// NodeTimeout is the cluster-node-timeout: how long a master must be unreachable before its
	// replica may take over.
	NodeTimeout time.Duration
}

// ClusterOption adjusts a Cluster's nodes.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	nodeTimeout time.Duration
	redis       []RedisOption
}

// WithNodeTimeout sets cluster-node-timeout (default 2 s).
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// WithNodeOptions applies redis-server options (WithAOF, WithArgs) to every node.
func WithNodeOptions(opts ...RedisOption) ClusterOption {
	return func(c *clusterConfig) { c.redis = append(c.redis, opts...) }
}

// clusterSetupTimeout bounds the joining of the nodes; on a loaded 2-core machine gossip takes a
// few seconds.
const clusterSetupTimeout = time.Minute

// StartCluster starts six nodes, assigns the 16384 slots to the first three in equal ranges, makes
// each of the others the replica of one master, and waits until every node reports
// cluster_state:ok and every replica is in sync and receives its master's writes (a write is
// acknowledged by WAIT). Everything stops with t.Cleanup.
func StartCluster(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	cfg := clusterConfig{nodeTimeout: 2 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	extra := redisArgs(cfg.redis)
	c := &Cluster{t: t, NodeTimeout: cfg.nodeTimeout}
	for i := 0; i < 6; i++ {
		n := startRedis(t, t.TempDir(), func(int) (first, last []string, err error) {
			bus, err := FreePort() // Redis's default bus port (port+10000) may be taken or out of range
			if err != nil {
				return nil, nil, err
			}
			last = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10),
				"--cluster-port", strconv.Itoa(bus)}, extra...)
			return nil, last, nil
		})
		c.Nodes = append(c.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterSetupTimeout)
	defer cancel()
	if err := c.join(ctx); err != nil {
		t.Fatalf("start redis cluster: %v", err)
	}
	return c
}

// join introduces the nodes, assigns the slots and the replicas, and waits until the cluster is
// whole.
func (c *Cluster) join(ctx context.Context) error {
	ids := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		id, err := n.cmd1(ctx, "CLUSTER", "MYID")
		if err != nil {
			return err
		}
		ids[i] = id
		if i < 3 { // distinct epochs: no collision to resolve between the masters
			if _, err := n.cmd1(ctx, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
				return err
			}
		}
	}
	for _, n := range c.Nodes[1:] {
		host, port, _ := net.SplitHostPort(n.Addr)
		if _, err := c.Nodes[0].cmd1(ctx, "CLUSTER", "MEET", host, port, n.busPort()); err != nil {
			return err
		}
	}
	const slots = 16384
	for i, n := range c.Nodes[:3] {
		lo, hi := i*slots/3, (i+1)*slots/3-1
		if _, err := n.cmd1(ctx, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			return err
		}
	}
	// A replica can only follow a master it knows of: wait until gossip has reached everyone.
	if err := poll(ctx, "every node to know the six", func() (bool, error) {
		for _, n := range c.Nodes {
			s, err := n.cmd1(ctx, "CLUSTER", "NODES")
			if err != nil || strings.Count(strings.TrimSpace(s), "\n") != len(c.Nodes)-1 {
				return false, err
			}
		}
		return true, nil
	}); err != nil {
		return err
	}
	for i, n := range c.Nodes[3:] {
		if _, err := n.cmd1(ctx, "CLUSTER", "REPLICATE", ids[i]); err != nil {
			return err
		}
	}
	return c.waitHealthy(ctx)
}

// waitHealthy waits until every running node reports cluster_state:ok, agrees that there are
// three masters with one replica each, every replica's link is up, and every master's replica
// acknowledges its writes.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	return poll(ctx, "cluster_state:ok with three masters and three synced replicas", func() (bool, error) {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			info, err := n.cmd1(ctx, "CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false, nil
			}
			nodes, err := n.cmd1(ctx, "CLUSTER", "NODES")
			if err != nil {
				return false, nil
			}
			masters, replicas := 0, 0
			for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
				f := strings.Fields(line)
				if len(f) < 8 || strings.Contains(f[2], "fail") {
					continue
				}
				switch {
				case strings.Contains(f[2], "master"):
					masters++
				case strings.Contains(f[2], "slave") && f[7] == "connected":
					replicas++
				}
			}
			if masters != 3 || replicas != 3 {
				return false, nil
			}
			repl, err := n.cmd1(ctx, "INFO", "replication")
			if err != nil {
				return false, nil
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return false, nil
			}
			if strings.Contains(repl, "role:master") {
				if ok, err := n.streams(ctx); err != nil || !ok {
					return false, nil
				}
			}
		}
		return true, nil
	})
}

// streams reports whether this master's replica acknowledges a write within 100 ms. A replica
// reports master_link_status:up as soon as it has loaded the first (diskless) sync, but the
// master sends it the writes that follow only after the replica's first REPLCONF ACK that arrives
// once the master has seen the sync end, up to a second later (Redis 7.0 logs "Waiting for
// REPLCONF ACK from slave to enable streaming"): a master stopped in that second takes every
// write it answered with it, and the promoted replica has none of them.
func (r *Redis) streams(ctx context.Context) (bool, error) {
	key, err := r.ownKey(ctx)
	if err != nil {
		return false, err
	}
	// One connection: WAIT counts the replicas that have this connection's writes.
	replies, err := r.Pipeline([]string{"SET", key, "1"}, []string{"DEL", key}, []string{"WAIT", "1", "100"})
	if err != nil {
		return false, err
	}
	return replies[2] != "0", nil
}

// ownKey returns a key of a slot this node serves as master.
func (r *Redis) ownKey(ctx context.Context) (string, error) {
	cl := r.Client()
	defer func() { _ = cl.Close() }()
	id, err := clusterslot.ID(ctx, cl)
	if err != nil {
		return "", err
	}
	shards, err := cl.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		mine := false
		for _, n := range sh.Nodes {
			mine = mine || (n.ID == id && n.Role == "master")
		}
		if !mine {
			continue
		}
		for _, sr := range sh.Slots {
			for i := 0; i < 1<<20; i++ {
				key := "testsrv:probe:" + strconv.Itoa(i)
				if slot := clusterslot.Of(key); sr.Start <= slot && slot <= sr.End {
					return key, nil
				}
			}
		}
	}
	return "", fmt.Errorf("%s serves no slot as master", r.Addr)
}

// WaitHealthy waits (up to a minute) until the cluster is whole again: every running node reports
// cluster_state:ok, three masters with one synced replica each that acknowledges its master's
// writes. Use it after restarting a node.
func (c *Cluster) WaitHealthy() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterSetupTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx); err != nil {
		c.t.Fatal(err)
	}
}

// Addrs returns the address of every node, the seed list a client is given.
func (c *Cluster) Addrs() []string { return addrs(c.Nodes) }

// Node returns the node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Redis { return byAddr(c.Nodes, addr) }

// addrs lists the servers' addresses.
func addrs(rs []*Redis) []string {
	a := make([]string, len(rs))
	for i, r := range rs {
		a[i] = r.Addr
	}
	return a
}

// byAddr returns the server listening on addr, or nil.
func byAddr(rs []*Redis, addr string) *Redis {
	for _, r := range rs {
		if r.Addr == addr {
			return r
		}
	}
	return nil
}

// MasterOf returns the node that serves key's slot, as a running node sees it.
func (c *Cluster) MasterOf(key string) *Redis {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := c.masterOf(ctx, key)
	if err != nil {
		c.t.Fatal(err)
	}
	n := c.Node(addr)
	if n == nil {
		c.t.Fatalf("master of %q is %s, not a node of this cluster", key, addr)
	}
	return n
}

// masterOf asks the running nodes, in turn, for the master of key's slot.
func (c *Cluster) masterOf(ctx context.Context, key string) (string, error) {
	var lastErr error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		addr, err := n.slotMaster(ctx, key)
		if err == nil {
			return addr, nil
		}
		lastErr = err
	}
	return "", fmt.Errorf("no running node names the master of %q: %w", key, lastErr)
}

// WaitFailover waits until a replica has taken over key's slot from old (killed or stopped): the
// running nodes all name another master, which reports role:master. It returns the new master and
// how long the wait took.
func (c *Cluster) WaitFailover(old *Redis, key string, timeout time.Duration) (*Redis, time.Duration) {
	c.t.Helper()
	return waitPromoted(c.t, "a replica to take over "+key+" from "+old.Addr, timeout, old, c.Nodes, c.Nodes,
		func(ctx context.Context, n *Redis) (string, error) { return n.slotMaster(ctx, key) })
}

// waitPromoted waits until every running asker but old names the same server, other than old
// (ask returns the address it names), and that server reports role:master. It returns the
// server and how long the wait took.
func waitPromoted(t testing.TB, what string, timeout time.Duration, old *Redis, askers, servers []*Redis,
	ask func(context.Context, *Redis) (string, error)) (*Redis, time.Duration) {
	t.Helper()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var promoted *Redis
	err := poll(ctx, what, func() (bool, error) {
		promoted = nil
		for _, n := range askers {
			if n == old || !n.Running() {
				continue
			}
			addr, err := ask(ctx, n)
			if err != nil || addr == old.Addr || (promoted != nil && promoted.Addr != addr) {
				return false, nil
			}
			promoted = byAddr(servers, addr)
		}
		if promoted == nil {
			return false, nil
		}
		repl, err := promoted.cmd1(ctx, "INFO", "replication")
		return err == nil && strings.Contains(repl, "role:master"), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return promoted, time.Since(began)
}

// slotMaster asks this node which address serves key's slot: the online master of the slot's
// shard.
func (r *Redis) slotMaster(ctx context.Context, key string) (string, error) {
	cl := r.Client()
	defer func() { _ = cl.Close() }()
	slot := clusterslot.Of(key)
	master, err := clusterslot.Master(ctx, cl, slot)
	if err != nil {
		return "", fmt.Errorf("%s: %q: %w", r.Addr, key, err)
	}
	return master.Addr, nil
}

// busPort is the node's --cluster-port argument.
func (r *Redis) busPort() string {
	for i, a := range r.args {
		if a == "--cluster-port" && i+1 < len(r.args) {
			return r.args[i+1]
		}
	}
	return ""
}

// Running reports whether the server process is up (it may be paused).
func (r *Redis) Running() bool { return r.proc != nil }

// Client returns a go-redis client of this server alone that neither retries nor waits long; the
// caller closes it.
func (r *Redis) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, PoolSize: 1})
}

// cmd1 runs one command on this server and returns its reply as a string.
func (r *Redis) cmd1(ctx context.Context, args ...string) (string, error) {
	cl := r.Client()
	defer func() { _ = cl.Close() }()
	a := make([]any, len(args))
	for i, s := range args {
		a[i] = s
	}
	v, err := cl.Do(ctx, a...).Result()
	if err != nil {
		return "", fmt.Errorf("%s: %s: %w", r.Addr, strings.Join(args, " "), err)
	}
	return fmt.Sprint(v), nil
}

// poll calls cond every 50 ms until it holds, fails, or ctx ends.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

package redisstore

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// provisioned provisions m in a context of its own, as Caddy does with a guest module.
func provisioned(t *testing.T, m *Module) (*Module, error) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return m, m.Provision(ctx)
}

// openModule provisions m and opens its store, closed when the test ends.
func openModule(t *testing.T, m *Module) *Store {
	t.Helper()
	if _, err := provisioned(t, m); err != nil {
		t.Fatal(err)
	}
	st, err := m.OpenStore()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st.(*Store)
}

// TestModuleValidate: JSON configurations that the Caddyfile parser cannot produce are refused at
// provisioning, each with the option's name; the bounds themselves are accepted.
func TestModuleValidate(t *testing.T) {
	at := func(m Module) *Module {
		if m.Addresses == nil {
			m.Addresses = []string{"a:1"}
		}
		return &m
	}
	for _, c := range []struct {
		m    *Module
		want string
	}{
		{&Module{}, "store redis: at least one address is required"},
		{at(Module{Addresses: []string{"{env.SECKILL_NO_SUCH_VARIABLE}"}}), "an address is empty once placeholders are replaced"},
		{at(Module{Addresses: []string{"a:1", "b:1"}}), "several addresses need cluster or sentinel"},
		{at(Module{Cluster: true, SentinelMaster: "m"}), "cluster and sentinel are exclusive"},
		{at(Module{Cluster: true, DB: 1}), "a cluster has only database 0"},
		{at(Module{DB: -1}), "db -1 is negative"},
		{at(Module{KeyPrefix: "shop{1}"}), `store redis: key_prefix "shop{1}": a brace`},
		{at(Module{AdmitBatch: MaxAdmitBatch + 1}), "admit_batch 1025"},
		{at(Module{PoolSize: -1}), "pool_size -1"},
		{at(Module{PoolSize: maxPoolSize + 1}), "pool_size 4097"},
		{at(Module{RebalanceInterval: caddy.Duration(-time.Second)}), "store redis: rebalance_interval -1s: want 10ms to 10m0s"},
		{at(Module{RebalanceInterval: caddy.Duration(time.Millisecond)}), "store redis: rebalance_interval 1ms"},
		{at(Module{RebalanceInterval: caddy.Duration(time.Hour)}), "store redis: rebalance_interval 1h0m0s"},
		{at(Module{ReplicasAck: -1}), "replicas_ack -1: want 1 to 16 replicas"},
		{at(Module{ReplicasAck: 17}), "replicas_ack 17"},
		{at(Module{ReplicasAckTimeout: caddy.Duration(time.Second / 10)}), "replicas_ack_timeout needs replicas_ack"},
		{at(Module{ReplicasAck: 1, ReplicasAckTimeout: caddy.Duration(time.Second)}), "replicas_ack timeout 1s: want 1ms to 500ms"},
		{at(Module{ReplicasAck: 1, ReplicasAckTimeout: caddy.Duration(time.Microsecond)}), "replicas_ack timeout 1µs"},
	} {
		if _, err := provisioned(t, c.m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("provision %+v = %v, want %q", *c.m, err, c.want)
		}
	}
	for _, ok := range []*Module{
		at(Module{RebalanceInterval: caddy.Duration(minRebalanceInterval)}),
		at(Module{RebalanceInterval: caddy.Duration(maxRebalanceInterval)}),
		at(Module{ReplicasAck: MaxReplicasAck, ReplicasAckTimeout: caddy.Duration(maxAckTimeout)}),
		at(Module{PoolSize: maxPoolSize, AdmitBatch: MaxAdmitBatch}),
	} {
		if _, err := provisioned(t, ok); err != nil {
			t.Errorf("provision %+v = %v", *ok, err)
		}
	}
}

// TestModuleOptionsReachTheStore: pool_size (and its default), rebalance_interval and replicas_ack
// reach the client and the store the module opens.
func TestModuleOptionsReachTheStore(t *testing.T) {
	if got, want := (&Module{}).poolSize(), max(defaultPoolSize, 10*runtime.GOMAXPROCS(0)); got != want {
		t.Errorf("default pool size %d, want %d", got, want)
	}
	master := testsrv.StartRedis(t)
	testsrv.StartReplica(t, master)
	st := openModule(t, &Module{Addresses: []string{master.Addr}, PoolSize: 7,
		RebalanceInterval: caddy.Duration(3 * time.Second), ReplicasAck: 1, ReplicasAckTimeout: caddy.Duration(time.Second / 2)})
	client, prefix := st.Redis()
	if c, ok := client.(*redis.Client); !ok || c.Options().PoolSize != 7 {
		t.Errorf("client %T: pool size not 7", client)
	}
	if prefix != "seckill" {
		t.Errorf("key prefix %q, want the default seckill", prefix)
	}
	if got := st.RebalanceInterval(); got != 3*time.Second {
		t.Errorf("store's rebalance interval %v, want 3s", got)
	}
	if !st.ReplicasAckEnabled() {
		t.Error("the store does not wait for replicas")
	}
}

// TestModulePoolKey: two configurations share a store exactly when every option is the same.
func TestModulePoolKey(t *testing.T) {
	a := &Module{Addresses: []string{"a:1"}}
	b := &Module{Addresses: []string{"a:1"}}
	c := &Module{Addresses: []string{"a:1"}, KeyPrefix: "other"}
	if a.PoolKey() != b.PoolKey() || a.PoolKey() == c.PoolKey() {
		t.Errorf("pool keys %q, %q, %q: want the first two equal and the third apart", a.PoolKey(), b.PoolKey(), c.PoolKey())
	}
}

package caddymodule

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestPoolSize: pool_size reaches the Redis client, its default is max(64, 10 × GOMAXPROCS), and
// JSON configurations outside 1-4096 (or a pool size on the memory store) are refused.
func TestPoolSize(t *testing.T) {
	if got, want := (&StoreConfig{Type: storeRedis}).poolSize(), max(defaultPoolSize, 10*runtime.GOMAXPROCS(0)); got != want {
		t.Errorf("default pool size %d, want %d", got, want)
	}
	rd := testsrv.StartRedis(t)
	b, err := newBackend(&StoreConfig{Type: storeRedis, Addresses: []string{rd.Addr}, PoolSize: 7}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Destruct() }()
	if c, ok := b.client.(*redis.Client); !ok || c.Options().PoolSize != 7 {
		t.Errorf("client %T: pool size not 7", b.client)
	}

	for _, c := range []struct {
		s    StoreConfig
		want string
	}{
		{StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, PoolSize: -1}, "pool_size -1"},
		{StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, PoolSize: maxPoolSize + 1}, "pool_size 4097"},
		{StoreConfig{Type: storeMemory, PoolSize: 8}, "store memory takes no redis options"},
	} {
		if err := c.s.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
}

// TestRebalanceIntervalConfig: rebalance_interval reaches the Redis store, and JSON
// configurations outside its bounds (or on another store) are refused with the option's name.
func TestRebalanceIntervalConfig(t *testing.T) {
	for _, c := range []struct {
		s    StoreConfig
		want string
	}{
		{StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, RebalanceInterval: caddy.Duration(-time.Second)}, "store redis: rebalance_interval -1s: want 10ms to 10m0s"},
		{StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, RebalanceInterval: caddy.Duration(time.Millisecond)}, "store redis: rebalance_interval 1ms"},
		{StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, RebalanceInterval: caddy.Duration(time.Hour)}, "store redis: rebalance_interval 1h0m0s"},
		{StoreConfig{Type: storeMemory, RebalanceInterval: caddy.Duration(time.Second)}, "store memory takes no redis options"},
		{StoreConfig{Type: storeLocal, Dir: "d", RebalanceInterval: caddy.Duration(time.Second)}, "store local takes no redis options"},
	} {
		if err := c.s.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
	for _, d := range []time.Duration{minRebalanceInterval, maxRebalanceInterval} {
		s := StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, RebalanceInterval: caddy.Duration(d)}
		if err := s.validate(); err != nil {
			t.Errorf("validate(rebalance_interval %v) = %v", d, err)
		}
	}
	// The interval reaches the store.
	srv := testsrv.StartRedis(t)
	rb, err := newBackend(&StoreConfig{Type: storeRedis, Addresses: []string{srv.Addr}, RebalanceInterval: caddy.Duration(3 * time.Second)}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rb.Destruct() }()
	if got := rb.store.(*redisstore.Store).RebalanceInterval(); got != 3*time.Second {
		t.Errorf("store's rebalance interval %v, want 3s", got)
	}
}

// TestReplicasAckConfig: replicas_ack reaches the Redis store, and JSON configurations outside its
// bounds (or on the memory store) are refused with the option's name.
func TestReplicasAckConfig(t *testing.T) {
	master := testsrv.StartRedis(t)
	testsrv.StartReplica(t, master)
	b, err := newBackend(&StoreConfig{Type: storeRedis, Addresses: []string{master.Addr}, ReplicasAck: 1, ReplicasAckTimeout: caddy.Duration(time.Second / 2)}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b.Destruct() }()
	if rs, ok := b.store.(*redisstore.Store); !ok || !rs.ReplicasAckEnabled() {
		t.Fatalf("store %T does not wait for replicas", b.store)
	}

	redisAt := func(n int, timeout time.Duration) StoreConfig {
		return StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, ReplicasAck: n, ReplicasAckTimeout: caddy.Duration(timeout)}
	}
	for _, c := range []struct {
		s    StoreConfig
		want string
	}{
		{redisAt(-1, 0), "replicas_ack -1: want 1 to 16 replicas"},
		{redisAt(17, 0), "replicas_ack 17"},
		{redisAt(0, time.Second/10), "replicas_ack_timeout needs replicas_ack"},
		{redisAt(1, time.Second), "replicas_ack timeout 1s: want 1ms to 500ms"},
		{redisAt(1, time.Microsecond), "replicas_ack timeout 1µs"},
		{StoreConfig{Type: storeMemory, ReplicasAck: 1}, "store memory takes no redis options"},
	} {
		if err := c.s.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
	bounds := redisAt(16, 500*time.Millisecond)
	if err := bounds.validate(); err != nil {
		t.Errorf("validate(16 replicas, 500ms) = %v", err)
	}
}

// TestStoreLocalValidate: JSON configurations of store local that the Caddyfile parser cannot
// produce are refused at provisioning with the directive's name.
func TestStoreLocalValidate(t *testing.T) {
	for _, c := range []struct {
		s    StoreConfig
		want string
	}{
		{StoreConfig{Type: storeLocal}, "store local: the folder is required"},
		{StoreConfig{Type: storeLocal, Dir: "  "}, "store local: the folder is required"},
		{StoreConfig{Type: storeLocal, Dir: "d", Fsync: "everysec"}, `store local: fsync "everysec": want always or no`},
		{StoreConfig{Type: storeLocal, Dir: "d", Addresses: []string{"a:1"}}, "store local takes no redis options"},
		{StoreConfig{Type: storeMemory, Dir: "d"}, "store memory takes no folder"},
		{StoreConfig{Type: storeRedis, Addresses: []string{"a:1"}, Fsync: fsyncAlways}, "store redis takes no folder and no fsync"},
		{StoreConfig{Type: "disk"}, `unknown store type "disk": want memory, local or redis`},
	} {
		if err := c.s.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("validate(%+v) = %v, want %q", c.s, err, c.want)
		}
	}
	for _, ok := range []StoreConfig{
		{Type: storeLocal, Dir: "d"}, {Type: storeLocal, Dir: "d", Fsync: fsyncNo}, {Type: storeLocal, Dir: "d", Fsync: fsyncAlways},
	} {
		if err := ok.validate(); err != nil {
			t.Errorf("validate(%+v) = %v", ok, err)
		}
	}
}

// TestOrdersSyncFollowsFsync: the embedded SQLite order database flushes its commits to the device
// exactly when the store does (store local with fsync always).
func TestOrdersSyncFollowsFsync(t *testing.T) {
	for _, c := range []struct {
		store StoreConfig
		want  bool
	}{
		{StoreConfig{Type: storeLocal, Dir: t.TempDir(), Fsync: fsyncAlways}, true},
		{StoreConfig{Type: storeLocal, Dir: t.TempDir()}, false},
		{StoreConfig{Type: storeMemory}, false},
	} {
		b, key, err := loadBackend(&c.store, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		o, okey, err := loadOrders(key, b, &OrdersConfig{Type: ordersSQLite, DSN: "o.db"}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if o.syncFull != c.want {
			t.Errorf("store %s fsync %q: orders syncFull %v, want %v", c.store.Type, c.store.Fsync, o.syncFull, c.want)
		}
		_, _ = pool.Delete(okey)
		_, _ = pool.Delete(key)
	}
}

// Reconcile on a store local folder that holds no store fails and creates nothing: a mistyped or
// relative folder must not become an empty sale that reconciles as "no activities".
func TestReconcileMissingLocalFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-such-data")
	app := &App{
		Store:  &StoreConfig{Type: storeLocal, Dir: dir},
		Orders: &OrdersConfig{Type: ordersSQLite, DSN: filepath.Join(dir, "orders.db")},
	}
	_, err := reconcileDirect(context.Background(), app, "")
	if err == nil || !strings.Contains(err.Error(), "no store in this folder") {
		t.Fatalf("reconcile on a missing folder = %v, want the no-store error", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reconcile created %s (stat: %v)", dir, err)
	}
}

// A store local folder reached through a symlink gets the same pool key before it exists (the
// first start) and after (a reload), so a reload finds the store it opened.
func TestStoreLocalKeyThroughSymlink(t *testing.T) {
	tmp := t.TempDir()
	real := filepath.Join(tmp, "real")
	if err := os.Mkdir(real, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	app := &App{Store: &StoreConfig{Type: storeLocal, Dir: filepath.Join(link, "data")}}
	before, err := app.resolveStore(caddy.NewReplacer())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(real, "data"), 0o750); err != nil {
		t.Fatal(err)
	}
	after, err := app.resolveStore(caddy.NewReplacer())
	if err != nil {
		t.Fatal(err)
	}
	if before.Dir != after.Dir || before.Dir != filepath.Join(real, "data") {
		t.Errorf("key before the folder existed %q, after %q; want both %q", before.Dir, after.Dir, filepath.Join(real, "data"))
	}
}

package orderbackend

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// env is one real deployment shape: a store and an order database, both private to the test.
type env struct {
	kind   string
	store  admission.Store
	repo   Repository
	redis  *testsrv.Redis    // nil with the memory store
	pg     *testsrv.Postgres // nil with SQLite
	dsn    string            // PostgreSQL DSN or SQLite path
	log    *zap.Logger
	client *redis.Client

	buckets    int // split activities into this many stock buckets (at most one per item)
	partitions int // PostgresOptions.Partitions of the repositories it opens
}

var dbSeq atomic.Int64

// newMemorySQLite: the embedded single-node default.
func newMemorySQLite(t *testing.T) *env {
	t.Helper()
	e := &env{kind: "memory+sqlite", log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
	e.store = localstore.NewMemory(localstore.MemoryOptions{})
	t.Cleanup(func() { _ = e.store.Close() })
	e.dsn = filepath.Join(t.TempDir(), "orders.db")
	e.repo = e.openRepo(t)
	return e
}

// newRedisPostgres: production, with a private redis-server and a fresh database in pg.
func newRedisPostgres(t *testing.T, pg *testsrv.Postgres) *env {
	t.Helper()
	return newRedisPostgresPartitions(t, pg, 0)
}

// newRedisPostgresPartitions is newRedisPostgres with a fresh database of n partitions (0: the default).
func newRedisPostgresPartitions(t *testing.T, pg *testsrv.Postgres, n int) *env {
	t.Helper()
	e := &env{kind: "redis+postgres", pg: pg, partitions: n, log: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))}
	e.redis = testsrv.StartRedis(t)
	e.client = redis.NewClient(&redis.Options{Addr: e.redis.Addr})
	t.Cleanup(func() { _ = e.client.Close() })
	s, err := redisstore.New(e.client, redisstore.Options{KeyPrefix: "seckill"})
	if err != nil {
		t.Fatal(err)
	}
	e.store = s
	e.dsn = pg.Database(t, fmt.Sprintf("t%d", dbSeq.Add(1)))
	e.repo = e.openRepo(t)
	return e
}

// openRepo opens another repository on the env's database, as a second process would.
func (e *env) openRepo(t *testing.T) Repository {
	t.Helper()
	kind := "sqlite"
	if e.pg != nil {
		kind = "postgres"
	}
	r, err := OpenRepositoryWith(context.Background(), kind, e.dsn, PostgresOptions{Partitions: e.partitions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// exec runs raw SQL on the env's database (to plant faults the way an operator or a bug would).
func (e *env) exec(t *testing.T, pgSQL, sqliteSQL string) {
	t.Helper()
	ctx := context.Background()
	if e.pg != nil {
		c, err := pgx.Connect(ctx, e.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close(ctx) }()
		if _, err := c.Exec(ctx, pgSQL); err != nil {
			t.Fatalf("exec %q: %v", pgSQL, err)
		}
		return
	}
	db, err := sql.Open("sqlite", e.dsn+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	if _, err := db.Exec(sqliteSQL); err != nil {
		t.Fatalf("exec %q: %v", sqliteSQL, err)
	}
}

// scenario runs under every env kind.
type scenario struct {
	name string
	fn   func(t *testing.T, e *env)
}

func runScenarios(t *testing.T, newEnv func(t *testing.T) *env, scenarios []scenario) {
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) { s.fn(t, newEnv(t)) })
	}
}

// openActivity defines an activity whose window is open now.
func (e *env) openActivity(t *testing.T, id string, stock, limit int64, payWithin time.Duration) admission.Activity {
	t.Helper()
	now := time.Now()
	a, err := e.store.Define(context.Background(), admission.Activity{
		ID: id, Stock: stock, Limit: limit, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: payWithin,
		Buckets: int(min(int64(e.buckets), stock)),
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// admit buys qty for user and requires a win.
func (e *env) admit(t *testing.T, act, user string, qty int64) admission.Decision {
	t.Helper()
	d, err := e.store.Admit(context.Background(), admission.Request{Activity: act, User: user, Qty: qty, RequestID: "req-" + user})
	if err != nil {
		t.Fatalf("admit %s: %v", user, err)
	}
	if d.Outcome != admission.Won {
		t.Fatalf("admit %s = %v, want a win", user, d.Outcome)
	}
	return d
}

// consumerOpts are fast settings for tests.
func (e *env) consumerOpts(name string, m *Metrics) ConsumerOptions {
	return ConsumerOptions{
		Name: name, Block: 200 * time.Millisecond, ClaimIdle: 300 * time.Millisecond, ClaimEvery: 100 * time.Millisecond,
		MaxDeliveries: 3, RetryDelay: 20 * time.Millisecond, Logger: e.log, Metrics: m,
	}
}

// start runs fn in a goroutine until the test ends (or the returned stop is called) and fails
// the test if fn returns an error.
func start(t *testing.T, fn func(ctx context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil {
			t.Errorf("background run: %v", err)
		}
	}()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

func (e *env) startConsumer(t *testing.T, act string, opts ConsumerOptions) (stop func()) {
	t.Helper()
	c, err := NewConsumer(e.store, e.repo, act, opts)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, c.Run)
}

// eventually polls cond until it holds; the deadline only bounds a broken test, it asserts no
// timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (e *env) orders(t *testing.T, act string) []Order {
	t.Helper()
	os, err := e.repo.Orders(context.Background(), act)
	if err != nil {
		t.Fatal(err)
	}
	return os
}

func (e *env) result(t *testing.T, act, user string) admission.Result {
	t.Helper()
	r, err := e.store.GetResult(context.Background(), act, user)
	if err != nil {
		t.Fatalf("result of %s: %v", user, err)
	}
	return r
}

func (e *env) reconcile(t *testing.T, act string) Report {
	t.Helper()
	r, err := Reconcile(context.Background(), e.store, e.repo, act)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// eventuallyReconciled waits until reconcile passes, for tests whose relay runs in the
// background (an outbox row is deleted only after its release).
func (e *env) eventuallyReconciled(t *testing.T, act string) Report {
	t.Helper()
	var r Report
	deadline := time.Now().Add(60 * time.Second)
	for r = e.reconcile(t, act); !r.OK(); r = e.reconcile(t, act) {
		if time.Now().After(deadline) {
			t.Fatalf("reconcile never passed:\n%s", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return r
}

func (e *env) requireReconciled(t *testing.T, act string) Report {
	t.Helper()
	r := e.reconcile(t, act)
	if !r.OK() {
		t.Fatalf("reconcile failed:\n%s", r)
	}
	return r
}

// relayAll empties the outbox.
func (e *env) relayAll(t *testing.T, m *Metrics) {
	t.Helper()
	if _, err := NewRelay(e.store, e.repo, RelayOptions{Logger: e.log, Metrics: m}).Once(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func users(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return out
}

func hasViolation(r Report, substr string) bool {
	for _, v := range r.Violations {
		if strings.Contains(v, substr) {
			return true
		}
	}
	return false
}

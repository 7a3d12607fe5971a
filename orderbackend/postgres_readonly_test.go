package orderbackend

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// A PostgreSQL that answers but refuses writes for a while, as a primary demoted in a failover or
// a standby the connections reach before they follow the new primary (SQLSTATE 25006, "cannot
// execute INSERT in a read-only transaction"), is an outage: the consumer waits it out and
// dead-letters nothing (found in review: it counted towards MaxDeliveries, so the wins of that
// moment were dead-lettered as poison, released and their buyers told failed).
func TestPostgresReadOnlyWaitedOut(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	e := newRedisPostgres(t, pg)
	ctx := context.Background()
	e.openActivity(t, "sale", 5, 1, time.Minute)
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1's order", func() bool { return m.OrdersCreated.Load() == 1 })

	// Read-only from the next session on; the pool's sessions are ended, so it reconnects.
	readOnly := func(on string) {
		e.exec(t, `BEGIN READ WRITE;
			DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET default_transaction_read_only = `+on+`', current_database()); END $$;
			COMMIT;
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid();`, "")
	}
	readOnly("on")
	e.admit(t, "sale", "u2", 1)
	time.Sleep(time.Second) // MaxDeliveries 3, RetryDelay 20ms: far longer than a poison takes
	readOnly("off")

	eventually(t, "u2's order", func() bool { return m.OrdersCreated.Load() == 2 || m.DeadLettered.Load() > 0 })
	if n := m.DeadLettered.Load(); n != 0 {
		dead, _ := e.store.DeadLetters(ctx, "sale", 10)
		t.Fatalf("%d wins dead-lettered while the database was read-only: %+v; u2's result: %+v", n, dead, e.result(t, "sale", "u2"))
	}
	eventually(t, "u2's result", func() bool { return e.result(t, "sale", "u2").Code == resultPending })
	e.requireReconciled(t, "sale")
}

package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestUpgradeBeforePartitions: a database made by the code before partitions (the migrations
// before 0004, written by their own SQL) is not rewritten at start: partitions 8 is refused,
// unset it opens unpartitioned with every order, payment and outbox row readable (0004 fills the
// buyer in); only Repartition splits it, keeping every row, after which the guard, the buyer's
// lookup and payment work on the partitions.
func TestUpgradeBeforePartitions(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	ctx := context.Background()
	dsn := pg.Database(t, "upgrade")

	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := migrations("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.version >= "0004" {
			break
		}
		if _, err := c.Exec(ctx, m.sql); err != nil {
			t.Fatalf("migration %s: %v", m.version, err)
		}
		if _, err := c.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, m.version); err != nil {
			t.Fatal(err)
		}
	}
	// 200 orders as the old code wrote them: every third paid (its attempt succeeded, an outbox
	// row), every fifth of the rest cancelled (a release row), the others pending.
	const n = 200
	now := time.Now().UTC().Truncate(time.Millisecond)
	var cancelled int
	var paid []string
	if _, err := c.Exec(ctx, `INSERT INTO stock (activity, total, "left") VALUES ('old', $1, 0)`, n); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id, resv, user := NewOrderID(), fmt.Sprintf("r%d", i), fmt.Sprintf("buyer-%d", i)
		status, kind := StatusPending, ""
		switch {
		case i%3 == 0:
			status, kind = StatusPaid, "paid"
		case i%5 == 0:
			status, kind = StatusCancelled, "release"
		}
		if _, err := c.Exec(ctx, `INSERT INTO orders (id, reservation_id, activity, user_id, qty, status, created_at, expires_at,
			paid_at, cancelled_at, payment_ref, amount, currency, title)
			VALUES ($1, $2, 'old', $3, 1, $4, $5, $6,
			CASE WHEN $4 = 'paid' THEN $5::timestamptz END, CASE WHEN $4 = 'cancelled' THEN $5::timestamptz END,
			CASE WHEN $4 = 'paid' THEN $1 || '-1' END, 1999, 'EUR', 'Phone')`,
			id, resv, user, string(status), now, now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if status == StatusPaid {
			paid = append(paid, id)
			if _, err := c.Exec(ctx, `INSERT INTO payments (key, order_id, attempt, amount, currency, status, provider_ref, created_at, updated_at)
				VALUES ($1 || '-1', $1, 1, 1999, 'EUR', 'succeeded', 'ch_' || $1, $2, $2)`, id, now); err != nil {
				t.Fatal(err)
			}
		}
		if status == StatusCancelled {
			cancelled++
		}
		if kind != "" {
			if _, err := c.Exec(ctx, `INSERT INTO outbox (activity, reservation_id, kind, created_at) VALUES ('old', $1, $2, $3)`,
				resv, kind, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = c.Close(ctx)

	// At start, a number of partitions other than the database's 1 is refused; nothing is split.
	_, err = NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: 8})
	var pce *PartitionsChangedError
	if !errors.As(err, &pce) || pce.Have != 1 || pce.Want != 8 {
		t.Fatalf("partitions 8 on a database made before partitions: %v", err)
	}
	if parts := pgQuery(t, dsn, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'orders'::regclass`); parts[0][0] != "0" {
		t.Fatalf("the refused start split orders into %s partitions", parts[0][0])
	}
	repo, err := NewPostgresWith(ctx, dsn, PostgresOptions{})
	if err != nil {
		t.Fatal(err)
	}
	before, err := repo.Orders(ctx, "old")
	if err != nil || len(before) != n {
		t.Fatalf("orders after the upgrade: %d of %d, %v", len(before), n, err)
	}
	beforePays, err := repo.Payments(ctx, "old")
	if err != nil || len(beforePays) != len(paid) {
		t.Fatalf("payments after the upgrade: %d of %d, %v", len(beforePays), len(paid), err)
	}
	beforeBox, err := repo.Outbox(ctx, 10*n)
	if err != nil || len(beforeBox) != len(paid)+cancelled {
		t.Fatalf("outbox after the upgrade: %d of %d, %v", len(beforeBox), len(paid)+cancelled, err)
	}
	byID := map[string]Order{}
	for _, o := range before {
		byID[o.ID] = o
	}
	for _, b := range beforeBox {
		if o, ok := byID[b.OrderID]; !ok || o.User != b.User || o.ReservationID != b.ReservationID {
			t.Fatalf("outbox row %+v does not name its order's buyer", b)
		}
	}
	_ = repo.Close()

	rep, err := Repartition(ctx, dsn, 8)
	if err != nil || rep.Before != 1 || rep.After != 8 || rep.Orders != n || rep.Payments != int64(len(paid)) {
		t.Fatalf("repartition: %+v, %v", rep, err)
	}
	r, err := NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	after, err := r.Orders(ctx, "old")
	if err != nil || !reflect.DeepEqual(after, before) {
		t.Fatalf("orders after repartition differ (%d of %d), %v", len(after), len(before), err)
	}
	if pays, err := r.Payments(ctx, "old"); err != nil || !reflect.DeepEqual(pays, beforePays) {
		t.Fatalf("payments after repartition differ, %v", err)
	}
	if box, err := r.Outbox(ctx, 10*n); err != nil || !reflect.DeepEqual(box, beforeBox) {
		t.Fatalf("outbox after repartition differs, %v", err)
	}
	per := pgQuery(t, dsn, `SELECT tableoid::regclass::text, count(*) FROM orders GROUP BY 1 ORDER BY 1`)
	if len(per) != 8 {
		t.Fatalf("the old orders fill %d partitions of 8: %v", len(per), per)
	}
	for _, o := range after {
		if o.Status != StatusPending {
			continue
		}
		// The guard rows 0004 made: a redelivered old win finds its order, in its partition.
		got, created, err := r.CreateOrder(ctx, NewOrder{ID: NewOrderID(), Activity: "old", ReservationID: o.ReservationID,
			User: o.User, Qty: 1, CreatedAt: now, ExpiresAt: now.Add(time.Hour)})
		if err != nil || created || got.ID != o.ID {
			t.Fatalf("redelivered old win = %+v %v %v", got, created, err)
		}
		if got, err := r.BuyerOrder(ctx, o.User, o.ID); err != nil || !reflect.DeepEqual(got, o) {
			t.Fatalf("old order by its buyer = %+v, %v", got, err)
		}
		if p, err := payNow(ctx, r, o.ID, time.Now()); err != nil || p.Status != StatusPaid {
			t.Fatalf("pay an old pending order: %+v, %v", p, err)
		}
		break
	}
}

package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// scanOnPartition matches a plan node reading one partition of orders or payments.
var scanOnPartition = regexp.MustCompile(` on (orders|payments)_p\d+ `)

// pgQuery runs a query on dsn and returns its rows as strings.
func pgQuery(t *testing.T, dsn, q string, args ...any) [][]string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	rows, err := c.Query(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		vs, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		row := make([]string, len(vs))
		for i, v := range vs {
			row[i] = fmt.Sprint(v)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fillSale creates n orders of n distinct users in activity a, pays every third one and cancels
// every fifth (an outbox row each), and returns the buyers' order ids.
func fillSale(t *testing.T, repo Repository, a string, n int) []Order {
	t.Helper()
	ctx := context.Background()
	if err := repo.EnsureStock(ctx, a, int64(n)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var ns []NewOrder
	for i := range n {
		ns = append(ns, newOrder(a, fmt.Sprintf("%s-r%d", a, i), fmt.Sprintf("user-%d", i), 1, now.Add(time.Hour)))
	}
	var out []Order
	for len(ns) > 0 {
		k := min(64, len(ns))
		outs, err := repo.CreateOrders(ctx, ns[:k])
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			if o.Err != nil || !o.Created {
				t.Fatalf("create: %+v", o)
			}
			out = append(out, o.Order)
		}
		ns = ns[k:]
	}
	for i, o := range out {
		switch {
		case i%3 == 0:
			if _, err := payNow(ctx, repo, o.ID, now); err != nil {
				t.Fatal(err)
			}
		case i%5 == 0:
			if _, err := repo.BuyerCancel(ctx, o.User, o.ID, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	return out
}

// TestPartitions: a new database takes the configured partitions, the orders spread over them,
// a buyer's lookup reads one partition, and another number at start is refused.
func TestPartitions(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	ctx := context.Background()
	dsn := pg.Database(t, "parts")
	repo, err := NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = repo.Close() }()

	for _, table := range []string{"orders", "payments"} {
		parts := pgQuery(t, dsn, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass ORDER BY 1`, table)
		if len(parts) != 8 {
			t.Fatalf("%s has partitions %v, want 8", table, parts)
		}
	}
	orders := fillSale(t, repo, "spread", 400)
	per := pgQuery(t, dsn, `SELECT tableoid::regclass::text, count(*) FROM orders GROUP BY 1 ORDER BY 1`)
	if len(per) != 8 {
		t.Fatalf("orders fill %d partitions of 8: %v", len(per), per)
	}
	t.Logf("orders per partition: %v", per)
	pays := pgQuery(t, dsn, `SELECT count(DISTINCT tableoid) FROM payments`)
	if pays[0][0] != "8" {
		t.Errorf("payments fill %s partitions of 8", pays[0][0])
	}

	// A buyer's lookup (the order API's, with the user from the token) reads one partition, the
	// same that holds the row; so does its payment lookup.
	o := orders[7]
	for _, q := range []string{
		fmt.Sprintf(`EXPLAIN SELECT %s FROM orders WHERE user_id = '%s' AND id = '%s'`, pgOrderCols, o.User, o.ID),
		fmt.Sprintf(`EXPLAIN SELECT %s FROM payments WHERE user_id = '%s' AND order_id = '%s' ORDER BY attempt DESC LIMIT 1`,
			pgPaymentCols, o.User, o.ID),
	} {
		plan := pgQuery(t, dsn, q)
		var text []string
		for _, l := range plan {
			text = append(text, l[0])
		}
		joined := strings.Join(text, "\n")
		if n := len(scanOnPartition.FindAllString(joined, -1)); n != 1 {
			t.Errorf("%s\nreads %d partitions, want 1:\n%s", q, n, joined)
		}
	}
	// With a generic plan (a prepared statement after five runs, as pgx's), the partitions are
	// pruned at run time: 7 of 8 removed.
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(ctx) }()
	var text []string
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`,
		`PREPARE q(text, text) AS SELECT ` + pgOrderCols + ` FROM orders WHERE user_id = $1 AND id = $2`,
		`EXPLAIN (ANALYZE, COSTS OFF) EXECUTE q('` + o.User + `', '` + o.ID + `')`} {
		// The connection's own protocol: pgx would take $1 for its placeholders.
		res, err := c.PgConn().Exec(ctx, q).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		for _, r := range res {
			for _, row := range r.Rows {
				text = append(text, string(row[0]))
			}
		}
	}
	if joined := strings.Join(text, "\n"); !strings.Contains(joined, "Subplans Removed: 7") {
		t.Errorf("generic plan of a buyer's lookup does not prune 7 partitions:\n%s", joined)
	}
	if got, err := repo.BuyerOrder(ctx, o.User, o.ID); err != nil || got.ID != o.ID {
		t.Fatalf("BuyerOrder = %+v, %v", got, err)
	}
	if _, err := repo.BuyerOrder(ctx, "someone-else", o.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another buyer's order: %v, want ErrNotFound", err)
	}

	// Another number at start is refused, naming the command; the same number or none opens.
	_, err = NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: 16})
	var pce *PartitionsChangedError
	if !errors.Is(err, ErrPartitionsChanged) || !errors.As(err, &pce) || pce.Have != 8 || pce.Want != 16 ||
		!strings.Contains(err.Error(), "caddy seckill partition") || !strings.Contains(err.Error(), "orderbackend partition") {
		t.Fatalf("partitions 16 on an 8-partition database: %v", err)
	}
	for _, n := range []int{0, 8} {
		r, err := NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: n})
		if err != nil {
			t.Fatalf("partitions %d: %v", n, err)
		}
		_ = r.Close()
	}
	if _, err := NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: MaxPartitions + 1}); err == nil {
		t.Fatal("partitions past the maximum accepted")
	}
}

// TestRepartition: an unpartitioned database (made by the migrations before 0004, or with
// partitions 1) is migrated by Repartition, keeping every order, payment and outbox row; a second
// run is a no-op; the guard still refuses a second order for a reservation; and it goes back.
func TestRepartition(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	ctx := context.Background()
	dsn := pg.Database(t, "repart")
	repo, err := NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	fillSale(t, repo, "sale", 300)
	before, err := repo.Orders(ctx, "sale")
	if err != nil {
		t.Fatal(err)
	}
	beforePays, err := repo.Payments(ctx, "sale")
	if err != nil {
		t.Fatal(err)
	}
	beforeBox, err := repo.Outbox(ctx, 1000)
	if err != nil || len(beforeBox) == 0 {
		t.Fatalf("outbox = %d rows, %v", len(beforeBox), err)
	}
	_ = repo.Close()

	for _, step := range []struct{ n, before int }{{8, 1}, {8, 8}, {16, 8}, {1, 16}} {
		rep, err := Repartition(ctx, dsn, step.n)
		if err != nil {
			t.Fatalf("partition %d: %v", step.n, err)
		}
		if rep.Before != step.before || rep.After != step.n || rep.Orders != 300 || rep.Payments != int64(len(beforePays)) {
			t.Fatalf("partition %d: %+v", step.n, rep)
		}
		t.Log(strings.TrimSpace(rep.String()))
		r, err := NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: step.n})
		if err != nil {
			t.Fatal(err)
		}
		after, err := r.Orders(ctx, "sale")
		if err != nil || !reflect.DeepEqual(after, before) {
			t.Fatalf("partition %d: orders differ (%d of %d), %v", step.n, len(after), len(before), err)
		}
		pays, err := r.Payments(ctx, "sale")
		if err != nil || !reflect.DeepEqual(pays, beforePays) {
			t.Fatalf("partition %d: payments differ, %v", step.n, err)
		}
		box, err := r.Outbox(ctx, 1000)
		if err != nil || !reflect.DeepEqual(box, beforeBox) {
			t.Fatalf("partition %d: outbox differs, %v", step.n, err)
		}
		// The reservation guard holds across partitions: a redelivered win finds its order, a
		// reused reservation for another buyer is a conflict.
		o := before[10]
		got, created, err := r.CreateOrder(ctx, NewOrder{ID: NewOrderID(), Activity: "sale", ReservationID: o.ReservationID,
			User: o.User, Qty: 1, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil || created || got.ID != o.ID {
			t.Fatalf("partition %d: redelivery = %+v %v %v", step.n, got, created, err)
		}
		if _, _, err := r.CreateOrder(ctx, NewOrder{ID: NewOrderID(), Activity: "sale", ReservationID: o.ReservationID,
			User: "thief", Qty: 1, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)}); !errors.Is(err, ErrConflict) {
			t.Fatalf("partition %d: reused reservation: %v, want ErrConflict", step.n, err)
		}
		// An unpaid order of the old table can still be paid.
		for _, o := range after {
			if o.Status == StatusPending {
				if _, err := payNow(ctx, r, o.ID, time.Now()); err != nil {
					t.Fatalf("partition %d: pay %s: %v", step.n, o.ID, err)
				}
				before, _ = r.Orders(ctx, "sale")
				beforePays, _ = r.Payments(ctx, "sale")
				beforeBox, _ = r.Outbox(ctx, 1000)
				break
			}
		}
		_ = r.Close()
	}
}

package orderbackend

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// benchWins are n new wins of activity a, each of its own buyer.
func benchWins(a string, n int) []NewOrder {
	now := time.Now()
	ns := make([]NewOrder, n)
	for i := range ns {
		ns[i] = NewOrder{ID: NewOrderID(), Activity: a, ReservationID: fmt.Sprintf("%s-%d", a, i),
			User: fmt.Sprintf("user-%07d", i), Qty: 1, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
	}
	return ns
}

// BenchmarkPartitions creates b.N orders (one buyer each) on PostgreSQL through CreateOrders in
// batches of 64, as the consumer does, with the orders table in 1 (plain) or 16 hash partitions.
// Run with -benchtime 10000x for the 10,000 wins.
func BenchmarkPartitions(b *testing.B) {
	pg := testsrv.StartPostgres(b)
	for _, n := range []int{1, 16} {
		b.Run(fmt.Sprintf("partitions%d", n), func(b *testing.B) {
			m := cpuMeter{pg: pg}
			ctx := context.Background()
			repo, err := NewPostgresWith(ctx, pg.Database(b, fmt.Sprintf("bp%d", dbSeq.Add(1))), PostgresOptions{Partitions: n})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = repo.Close() })
			if err := repo.EnsureStock(ctx, "a", int64(b.N)); err != nil {
				b.Fatal(err)
			}
			ns := benchWins("a", b.N)
			from := m.read(b)
			b.ResetTimer()
			start := time.Now()
			for lo := 0; lo < len(ns); lo += 64 {
				outs, err := repo.CreateOrders(ctx, ns[lo:min(lo+64, len(ns))])
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range outs {
					if !o.Created {
						b.Fatalf("outcome %+v", o)
					}
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			m.report(b, from, m.read(b), b.N)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "orders/s")
		})
	}
}

// BenchmarkArchive archives a finished sale of b.N orders (all paid) in batches of
// DefaultArchiveBatch, on PostgreSQL (8 partitions) and SQLite. Run with -benchtime 100000x for
// the 100,000 orders.
func BenchmarkArchive(b *testing.B) {
	pg := testsrv.StartPostgres(b)
	for _, kind := range []string{"postgres", "sqlite"} {
		b.Run(kind, func(b *testing.B) {
			ctx := context.Background()
			var (
				repo Repository
				err  error
				dsn  string
			)
			if kind == "postgres" {
				dsn = pg.Database(b, fmt.Sprintf("ba%d", dbSeq.Add(1)))
				repo, err = NewPostgresWith(ctx, dsn, PostgresOptions{Partitions: 8})
			} else {
				dsn = filepath.Join(b.TempDir(), "orders.db")
				repo, err = NewSQLite(ctx, dsn)
			}
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = repo.Close() })
			if err := repo.EnsureStock(ctx, "a", int64(b.N)); err != nil {
				b.Fatal(err)
			}
			ns := benchWins("a", b.N)
			for lo := 0; lo < len(ns); lo += 1000 {
				if _, err := repo.CreateOrders(ctx, ns[lo:min(lo+1000, len(ns))]); err != nil {
					b.Fatal(err)
				}
			}
			// A finished sale: every order paid (set directly; the payment path is not measured).
			if kind == "postgres" {
				c, err := pgx.Connect(ctx, dsn)
				if err != nil {
					b.Fatal(err)
				}
				_, err = c.Exec(ctx, `UPDATE orders SET status = 'paid', paid_at = now()`)
				_ = c.Close(ctx)
				if err != nil {
					b.Fatal(err)
				}
			} else if _, err := repo.(*SQLite).w.ExecContext(ctx, `UPDATE orders SET status = 'paid', paid_at = 0`); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			rep, err := repo.Archive(ctx, "a", 0)
			elapsed := time.Since(start)
			b.StopTimer()
			if err != nil || rep.Moved != int64(b.N) || rep.HotAfter != 0 {
				b.Fatalf("archive = %+v, %v", rep, err)
			}
			b.ReportMetric(elapsed.Seconds(), "s/archive")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "orders/s")
		})
	}
}

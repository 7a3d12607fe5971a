package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tests of SQLite's prepared statements (sqlite_stmt.go).

// Batches of many sizes, each size met several times (the first run unprepared, the later ones
// with the statement prepared for that row count, larger ones in chunks), all new (fast path) or
// mixed with redelivered wins, other buyers' reservations and wins the stock refuses (careful
// path, whose existing-orders read and insert have their own counts): every outcome is the
// model's, and so is the database afterwards. A statement of the wrong count (or the wrong
// query) would bind the wrong rows or fail.
func TestSQLiteStmtSizes(t *testing.T) {
	s := openTestSQLite(t)
	ctx := context.Background()
	m := newOrderModel()
	const stock = 2500
	if err := s.EnsureStock(ctx, "a", stock); err != nil {
		t.Fatal(err)
	}
	m.left["a"] = stock
	rng := rand.New(rand.NewPCG(3, 5))
	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	var seen []NewOrder
	next, refused := 0, 0
	fresh := func() NewOrder {
		n := newOrder("a", fmt.Sprintf("r%05d", next), fmt.Sprintf("u%05d", next), int64(1+rng.IntN(3)), exp)
		next++
		seen = append(seen, n)
		return n
	}
	for round := range 4 {
		for _, size := range []int{1, 5, 2, 64, 3, 65, 1, 130, 7, 64, 2, 5} {
			for _, mixed := range []bool{false, true} {
				ns := make([]NewOrder, 0, size)
				for range size {
					switch k := rng.IntN(10); {
					case !mixed || len(seen) == 0 || k < 5:
						ns = append(ns, fresh())
					case k < 8: // redelivered: same buyer and quantity, a fresh order id
						p := seen[rng.IntN(len(seen))]
						ns = append(ns, newOrder("a", p.ReservationID, p.User, p.Qty, exp))
					default: // another buyer's reservation
						p := seen[rng.IntN(len(seen))]
						ns = append(ns, newOrder("a", p.ReservationID, "thief", p.Qty, exp))
					}
				}
				want := m.create(ns)
				for _, w := range want {
					if errors.Is(w.err, ErrWinRefused) {
						refused++
					}
				}
				got, err := s.CreateOrders(ctx, ns)
				if err != nil {
					t.Fatalf("round %d, %d wins (mixed %v): %v", round, size, mixed, err)
				}
				checkModel(t, fmt.Sprintf("round %d, %d wins (mixed %v)", round, size, mixed), ns, got, want)
			}
		}
	}
	if t.Failed() {
		return
	}
	if refused == 0 {
		t.Fatalf("the stock lasted (%d left): no win was refused, make it smaller", m.left["a"])
	}
	// The cache was used: counts met were prepared (up to sqliteChunk; 65 and 130 are chunks).
	if n := s.insert.prepared(); n < 6 {
		t.Errorf("%d insert statements prepared, want at least 6", n)
	}
	if n := s.existing.prepared(); n < 6 {
		t.Errorf("%d existing-orders statements prepared, want at least 6", n)
	}
	if st, err := s.Stock(ctx, "a"); err != nil || st.Left != m.left["a"] {
		t.Errorf("stock = %+v, %v; want %d left", st, err, m.left["a"])
	}
	orders := ordersOf(t, s, "a")
	if len(orders) != len(m.orders["a"]) {
		t.Errorf("%d orders in the database, model has %d", len(orders), len(m.orders["a"]))
	}
	for _, o := range orders {
		w, ok := m.orders["a"][o.ReservationID]
		if !ok || o.ID != w.ID || o.User != w.User || o.Qty != w.Qty || o.Status != StatusPending {
			t.Errorf("order %+v; model has %+v (%v)", o, w, ok)
		}
		// The reads through the readers' statements agree.
		if byID, err := s.Order(ctx, o.ID); err != nil || byID.ID != o.ID || byID.ReservationID != o.ReservationID {
			t.Errorf("Order(%s) = %+v, %v", o.ID, byID, err)
		}
		if byResv, err := s.OrderByReservation(ctx, "a", o.ReservationID); err != nil || byResv.ID != o.ID {
			t.Errorf("OrderByReservation(%s) = %+v, %v", o.ReservationID, byResv, err)
		}
	}
}

// Close closes every prepared statement, and the closed repository refuses work with errors.
func TestSQLiteStmtClose(t *testing.T) {
	s := openTestSQLite(t)
	ctx := context.Background()
	if err := s.EnsureStock(ctx, "a", 100); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	var ids []string
	for i := range 3 { // the second and third batch of 2 run the prepared statements
		ns := []NewOrder{newOrder("a", fmt.Sprintf("r%d-0", i), fmt.Sprintf("u%d-0", i), 1, exp),
			newOrder("a", fmt.Sprintf("r%d-1", i), fmt.Sprintf("u%d-1", i), 1, exp)}
		mustCreateOrders(t, s, append(ns, ns[0])) // a reservation twice: the careful path
		ids = append(ids, ns[0].ID)
	}
	if _, err := payNow(ctx, s, ids[0], time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, ids[1], time.Now()); err != nil {
		t.Fatal(err)
	}
	if s.insert.prepared() == 0 || s.existing.prepared() == 0 {
		t.Fatalf("prepared: %d inserts, %d reads; want some", s.insert.prepared(), s.existing.prepared())
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if s.insert.prepared() != 0 || s.existing.prepared() != 0 {
		t.Errorf("after close, prepared: %d inserts, %d reads; want none", s.insert.prepared(), s.existing.prepared())
	}
	// A statement Close left open would answer "database is closed" instead.
	for i, st := range s.fixed.all() {
		if _, err := st.ExecContext(ctx); err == nil || !strings.Contains(err.Error(), "statement is closed") {
			t.Errorf("fixed statement %d after close: %v; want statement is closed", i, err)
		}
	}
	ns := []NewOrder{newOrder("a", "late", "u-late", 1, exp)}
	if _, err := s.CreateOrders(ctx, ns); err == nil {
		t.Error("CreateOrders after close succeeded")
	}
	if _, err := s.Order(ctx, ids[2]); err == nil {
		t.Error("Order after close succeeded")
	}
	if _, err := s.Outbox(ctx, 10); err == nil {
		t.Error("Outbox after close succeeded")
	}
}

// prepared counts the statements prepared (for tests).
func (c *sizedStmts) prepared() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, st := range c.stmts {
		if st != nil {
			n++
		}
	}
	return n
}

// TestSQLiteSyncFull: SyncFull opens the writer with synchronous=FULL (2); the default is NORMAL (1).
func TestSQLiteSyncFull(t *testing.T) {
	for _, c := range []struct {
		opts SQLiteOptions
		want int
	}{{SQLiteOptions{}, 1}, {SQLiteOptions{SyncFull: true}, 2}} {
		s, err := NewSQLiteOptions(t.Context(), filepath.Join(t.TempDir(), "o.db"), c.opts)
		if err != nil {
			t.Fatal(err)
		}
		var got int
		if err := s.w.QueryRowContext(t.Context(), `PRAGMA synchronous`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		if got != c.want {
			t.Errorf("%+v: synchronous %d, want %d", c.opts, got, c.want)
		}
	}
}

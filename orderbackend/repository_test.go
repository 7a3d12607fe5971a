package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

var repositoryScenarios = []scenario{
	{"CreateOrderOnce", testCreateOrderOnce},
	{"StockGuard", testStockGuard},
	{"ConcurrentCreate", testConcurrentCreate},
	{"PayAndExpire", testPayAndExpire},
	{"OwnerCancel", testOwnerCancel},
	{"EnsureStock", testEnsureStock},
	{"MigrationsTwice", testMigrationsTwice},
}

func newOrder(act, resv, user string, qty int64, expires time.Time) NewOrder {
	return NewOrder{ID: NewOrderID(), Activity: act, ReservationID: resv, User: user, Qty: qty,
		CreatedAt: time.Now(), ExpiresAt: expires}
}

func mustStock(t *testing.T, r Repository, act string) Stock {
	t.Helper()
	s, err := r.Stock(context.Background(), act)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func testCreateOrderOnce(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	n := newOrder("a", "r1", "u1", 2, time.Now().Add(time.Hour))
	o, created, err := e.repo.CreateOrder(ctx, n)
	if err != nil || !created {
		t.Fatalf("create = %+v, %v, %v", o, created, err)
	}
	if o.ID != n.ID || o.Status != StatusPending || o.User != "u1" || o.Qty != 2 {
		t.Errorf("order = %+v", o)
	}
	// A redelivery (with a fresh order id) finds the same order and takes no stock.
	again, created, err := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u1", 2, time.Now().Add(time.Hour)))
	if err != nil || created || again.ID != o.ID {
		t.Fatalf("redelivery = %+v, created %v, err %v; want the first order", again, created, err)
	}
	if got, _ := e.repo.Order(ctx, o.ID); got != o {
		t.Errorf("stored order = %+v, want %+v", got, o)
	}
	if s := mustStock(t, e.repo, "a"); s.Total != 5 || s.Left != 3 {
		t.Errorf("stock = %+v, want 5 total, 3 left", s)
	}
	// The same reservation for another user is a corrupt win, not someone else's order.
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u2", 2, time.Now())); !errors.Is(err, ErrConflict) {
		t.Errorf("conflicting win: err = %v, want ErrConflict", err)
	}
	if _, err := e.repo.Order(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown order: err = %v", err)
	}
	if _, err := e.repo.OrderByReservation(ctx, "a", "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown reservation: err = %v", err)
	}
}

func testStockGuard(t *testing.T, e *env) {
	ctx := context.Background()
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("nostock", "r0", "u", 1, time.Now())); !errors.Is(err, ErrWinRefused) {
		t.Errorf("win for an activity without stock row: err = %v, want ErrWinRefused", err)
	}
	if err := e.repo.EnsureStock(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u1", 2, time.Now())); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r2", "u2", 2, time.Now())); !errors.Is(err, ErrWinRefused) {
		t.Fatalf("win beyond the stock: err = %v, want ErrWinRefused", err)
	}
	// Refused means nothing written: no order, stock untouched, and the exact remainder still sells.
	if _, err := e.repo.OrderByReservation(ctx, "a", "r2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused win left an order: %v", err)
	}
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r3", "u3", 1, time.Now())); err != nil {
		t.Fatalf("last item: %v", err)
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 0 {
		t.Errorf("left = %d, want 0", s.Left)
	}
}

func testConcurrentCreate(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 100); err != nil {
		t.Fatal(err)
	}
	other := e.openRepo(t) // a second process on the same database
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		ids     = map[string]bool{}
	)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := e.repo
			if i%2 == 1 {
				r = other
			}
			o, c, err := r.CreateOrder(ctx, newOrder("a", "r1", "u1", 1, time.Now().Add(time.Hour)))
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[o.ID] = true
			if c {
				created++
			}
		}()
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Errorf("%d creations, %d distinct orders; want exactly one", created, len(ids))
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 99 {
		t.Errorf("left = %d, want 99", s.Left)
	}
}

func testPayAndExpire(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().Truncate(time.Millisecond)
	exp := t0.Add(time.Minute)
	a, _, _ := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u1", 1, exp))
	b, _, _ := e.repo.CreateOrder(ctx, newOrder("a", "r2", "u2", 3, exp))

	// Paid just before the window closes.
	paid, err := payNow(ctx, e.repo, a.ID, exp.Add(-time.Millisecond))
	if err != nil || paid.Status != StatusPaid || paid.PaymentRef != a.ID+"-1" || paid.PaidAt.IsZero() {
		t.Fatalf("pay = %+v, %v", paid, err)
	}
	if _, err := payNow(ctx, e.repo, a.ID, exp.Add(-time.Millisecond)); !errors.Is(err, ErrNotPending) {
		t.Errorf("second pay: err = %v, want ErrNotPending", err)
	}
	// At the expiry instant it is too late: expires_at > now is false.
	if _, err := payNow(ctx, e.repo, b.ID, exp); !errors.Is(err, ErrExpired) {
		t.Errorf("pay at expiry: %v; want ErrExpired", err)
	}
	if o, _ := e.repo.Order(ctx, b.ID); o.Status != StatusPending {
		t.Errorf("after a pay at expiry the order is %s, want still pending", o.Status)
	}
	if _, err := payNow(ctx, e.repo, "nope", t0); !errors.Is(err, ErrNotFound) {
		t.Errorf("pay unknown: err = %v", err)
	}
	// Nothing to sweep before the window closes; b (not a, which is paid) at the instant.
	if got, err := e.repo.CancelExpired(ctx, exp.Add(-time.Millisecond), 10); err != nil || len(got) != 0 {
		t.Fatalf("early sweep = %+v, %v", got, err)
	}
	got, err := e.repo.CancelExpired(ctx, exp, 10)
	if err != nil || len(got) != 1 || got[0].ID != b.ID || got[0].Status != StatusCancelled {
		t.Fatalf("sweep = %+v, %v; want b cancelled", got, err)
	}
	if again, _ := e.repo.CancelExpired(ctx, exp.Add(time.Hour), 10); len(again) != 0 {
		t.Errorf("second sweep cancelled %+v again", again)
	}
	if _, err := payNow(ctx, e.repo, b.ID, t0); !errors.Is(err, ErrExpired) {
		t.Errorf("pay of a cancelled order: err = %v, want ErrExpired", err)
	}
	// b's 3 items are back in the database, and the relay has a release and a paid row.
	if s := mustStock(t, e.repo, "a"); s.Left != 9 {
		t.Errorf("left = %d, want 9", s.Left)
	}
	rows, err := e.repo.Outbox(ctx, 10)
	if err != nil || len(rows) != 2 {
		t.Fatalf("outbox = %+v, %v", rows, err)
	}
	if rows[0].Kind != OutboxPaid || rows[0].OrderID != a.ID || rows[0].User != "u1" ||
		rows[1].Kind != OutboxRelease || rows[1].ReservationID != "r2" || rows[1].User != "u2" {
		t.Errorf("outbox = %+v", rows)
	}
	if n, _ := e.repo.OutboxLen(ctx, "a"); n != 2 {
		t.Errorf("outbox length = %d", n)
	}
	for _, r := range rows {
		if err := e.repo.DeleteOutbox(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
		if err := e.repo.DeleteOutbox(ctx, r.ID); err != nil {
			t.Fatalf("delete twice: %v", err)
		}
	}
	if n, _ := e.repo.OutboxLen(ctx, "a"); n != 0 {
		t.Errorf("outbox length after delete = %d", n)
	}
}

func testOwnerCancel(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 4); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o, _, _ := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u1", 2, now.Add(time.Hour)))
	p, _, _ := e.repo.CreateOrder(ctx, newOrder("a", "r2", "u2", 1, now.Add(time.Hour)))
	for range 2 { // cancelling twice gives back once
		c, err := e.repo.Cancel(ctx, o.ID, now)
		if err != nil || c.Status != StatusCancelled {
			t.Fatalf("cancel = %+v, %v", c, err)
		}
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 3 {
		t.Errorf("left = %d, want 3", s.Left)
	}
	if n, _ := e.repo.OutboxLen(ctx, "a"); n != 1 {
		t.Errorf("outbox rows = %d, want 1", n)
	}
	if _, err := payNow(ctx, e.repo, p.ID, now); err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.Cancel(ctx, p.ID, now); !errors.Is(err, ErrNotPending) {
		t.Errorf("cancel of a paid order: err = %v, want ErrNotPending", err)
	}
}

func testEnsureStock(t *testing.T, e *env) {
	ctx := context.Background()
	for range 2 {
		if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if _, _, err := e.repo.CreateOrder(ctx, newOrder("a", fmt.Sprint("r", i), fmt.Sprint("u", i), 1, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	// A new total moves left by the difference: what was sold stays sold.
	if err := e.repo.EnsureStock(ctx, "a", 6); err != nil {
		t.Fatal(err)
	}
	if s := mustStock(t, e.repo, "a"); s.Total != 6 || s.Left != 2 {
		t.Errorf("stock after lowering = %+v, want 6/2", s)
	}
	if err := e.repo.EnsureStock(ctx, "a", 3); err == nil {
		t.Error("a total below what was sold was accepted")
	}
	if s := mustStock(t, e.repo, "a"); s.Total != 6 || s.Left != 2 {
		t.Errorf("refused change moved the stock to %+v", s)
	}
}

func testMigrationsTwice(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	again := e.openRepo(t) // migrations run again, find everything applied
	if s := mustStock(t, again, "a"); s.Total != 1 {
		t.Errorf("stock after reopening = %+v", s)
	}
}

// Order ids sort by creation time (the index locality the batches rely on), keep 96 random bits,
// and pass the API's check.
func TestNewOrderID(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := range 2000 {
		if i%500 == 0 {
			time.Sleep(2 * time.Millisecond) // cross millisecond boundaries
		}
		before := time.Now().UnixMilli()
		id := NewOrderID()
		after := time.Now().UnixMilli()
		if len(id) != 37 || id[0] != 'o' || !validOrderID(id) || seen[id] {
			t.Fatalf("id %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
		var ms int64
		if _, err := fmt.Sscanf(id[1:13], "%012x", &ms); err != nil || ms < before || ms > after {
			t.Fatalf("id %q: time prefix %d (%v), made between %d and %d", id, ms, err, before, after)
		}
		if id[:13] < prev[:min(13, len(prev))] {
			t.Fatalf("id %q sorts before the earlier %q", id, prev)
		}
		prev = id
	}
}

package orderbackend

import (
	"context"
	"errors"
	"os"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

var archiveScenarios = []scenario{
	{"ArchiveUnderLoad", testArchiveUnderLoad},
	{"ArchiveKilledResumes", testArchiveKilledResumes},
	{"CreateAfterArchive", testCreateAfterArchive},
}

// settleAll pays or cancels every pending order of act and empties the outbox, as the sweeper and
// the relay would once the sale is over.
func settleAll(t *testing.T, e *env, act string, m *Metrics) {
	t.Helper()
	ctx := context.Background()
	for i, o := range e.orders(t, act) {
		if o.Status != StatusPending {
			continue
		}
		var err error
		if i%3 == 0 {
			_, err = e.repo.BuyerCancel(ctx, o.User, o.ID, time.Now())
		} else {
			_, err = payNow(ctx, e.repo, o.ID, time.Now())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	e.relayAll(t, m)
}

// A finished sale is archived in small batches while another sale's orders are being created and
// paid: reconcile holds for both afterwards, the archived orders read as before, and a second run
// moves nothing. A sale with pending orders is refused.
func testArchiveUnderLoad(t *testing.T, e *env) {
	ctx := context.Background()
	m := new(Metrics)
	e.openActivity(t, "old", 150, 1, 15*time.Minute)
	e.openActivity(t, "new", 150, 1, 15*time.Minute)
	e.startConsumer(t, "old", e.consumerOpts("c-old", m))
	for _, u := range users("o", 150) {
		e.admit(t, "old", u, 1)
	}
	eventually(t, "150 orders of the old sale", func() bool { return len(e.orders(t, "old")) == 150 })
	if _, err := e.repo.Archive(ctx, "old", 10); !errors.Is(err, ErrNotFinished) {
		t.Fatalf("archive of a sale with pending orders: %v, want ErrNotFinished", err)
	}
	settleAll(t, e, "old", m)
	e.requireReconciled(t, "old")
	before := e.orders(t, "old")
	beforePays, err := e.repo.Payments(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}

	// The other sale runs meanwhile: wins become orders and are paid as they come.
	e.startConsumer(t, "new", e.consumerOpts("c-new", m))
	var wg sync.WaitGroup
	var stopPaying atomic.Bool
	wg.Add(2)
	go func() {
		defer wg.Done()
		for _, u := range users("n", 150) {
			if _, err := e.store.Admit(ctx, admission.Request{Activity: "new", User: u, Qty: 1, RequestID: "req-" + u}); err != nil {
				t.Errorf("admit %s: %v", u, err)
				return
			}
		}
	}()
	var paid atomic.Int64
	go func() {
		defer wg.Done()
		for !stopPaying.Load() {
			os, err := e.repo.Orders(ctx, "new")
			if err != nil {
				t.Errorf("orders of new: %v", err)
				return
			}
			for _, o := range os {
				if o.Status == StatusPending {
					if _, err := payNow(ctx, e.repo, o.ID, time.Now()); err != nil {
						t.Errorf("pay %s: %v", o.ID, err)
						return
					}
					paid.Add(1)
				}
			}
		}
	}()
	rep, err := e.repo.Archive(ctx, "old", 10)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "150 orders of the new sale", func() bool { return len(e.orders(t, "new")) == 150 })
	stopPaying.Store(true)
	wg.Wait()
	t.Logf("archived while %d orders of the other sale were paid: %s", paid.Load(), rep)
	if rep.HotBefore != 150 || rep.ArchivedBefore != 0 || rep.HotAfter != 0 || rep.ArchivedAfter != 150 || rep.Moved != 150 ||
		rep.PaymentsMoved != int64(len(beforePays)) || rep.Batches != 15 {
		t.Fatalf("report = %+v", rep)
	}
	if after := e.orders(t, "old"); !reflect.DeepEqual(after, before) {
		t.Fatalf("orders read from the archive differ")
	}
	if pays, err := e.repo.Payments(ctx, "old"); err != nil || !reflect.DeepEqual(pays, beforePays) {
		t.Fatalf("payments read from the archive differ: %v", err)
	}
	o := before[3]
	if got, err := e.repo.BuyerOrder(ctx, o.User, o.ID); err != nil || !reflect.DeepEqual(got, o) {
		t.Fatalf("archived order by its buyer = %+v, %v", got, err)
	}
	if got, err := e.repo.OrderByReservation(ctx, "old", o.ReservationID); err != nil || got.ID != o.ID {
		t.Fatalf("archived order by reservation = %+v, %v", got, err)
	}
	e.requireReconciled(t, "old")
	again, err := e.repo.Archive(ctx, "old", 10)
	if err != nil || again.Moved != 0 || again.ArchivedAfter != 150 {
		t.Fatalf("second archive = %+v, %v", again, err)
	}
	settleAll(t, e, "new", m)
	e.requireReconciled(t, "new")
}

// TestArchiveKillChild is the child of ArchiveKilledResumes: it archives a sale one order per
// transaction until the parent SIGKILLs it.
func TestArchiveKillChild(t *testing.T) {
	kind, dsn, act := os.Getenv("SECKILL_ARCHKILL_KIND"), os.Getenv("SECKILL_ARCHKILL_DB"), os.Getenv("SECKILL_ARCHKILL_ACTIVITY")
	if dsn == "" {
		t.Skip("the child of the ArchiveKilledResumes scenario")
	}
	repo, err := OpenRepository(context.Background(), kind, dsn)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := repo.Archive(context.Background(), act, 1)
	t.Fatalf("the archive ended (%+v, %v): the child was to be killed first", rep, err)
}

// An archive SIGKILLed in the middle leaves every order in the hot table or the archive, never
// both or neither; the next run moves the rest and every order reads as before.
func testArchiveKilledResumes(t *testing.T, e *env) {
	ctx := context.Background()
	const n = 600
	fillSale(t, e.repo, "done", n)
	for _, o := range e.orders(t, "done") {
		if o.Status == StatusPending {
			if _, err := e.repo.BuyerCancel(ctx, o.User, o.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	box, err := e.repo.Outbox(ctx, 10*n)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range box {
		if err := e.repo.DeleteOutbox(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	before := e.orders(t, "done")
	beforePays, err := e.repo.Payments(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	kind := "sqlite"
	if e.pg != nil {
		kind = "postgres"
	}
	counts := func() (hot, archived int64) {
		var r ArchiveReport
		switch repo := e.repo.(type) {
		case *Postgres:
			h, a, err := repo.pgArchiveCounts(ctx, "done")
			if err != nil {
				t.Fatal(err)
			}
			r.HotAfter, r.ArchivedAfter = h, a
		case *SQLite:
			if err := repo.r.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM orders WHERE activity = 'done'),
				(SELECT count(*) FROM orders_archive WHERE activity = 'done')`).Scan(&r.HotAfter, &r.ArchivedAfter); err != nil {
				t.Fatal(err)
			}
		}
		return r.HotAfter, r.ArchivedAfter
	}
	child, _ := testsrv.StartChild(t, "TestArchiveKillChild", "SECKILL_ARCHKILL_KIND="+kind,
		"SECKILL_ARCHKILL_DB="+e.dsn, "SECKILL_ARCHKILL_ACTIVITY=done")
	eventually(t, "the child archived some", func() bool { _, a := counts(); return a >= 20 })
	testsrv.KillChild(t, child)
	// A COMMIT the child sent just before its death may still be carried out by its PostgreSQL
	// backend after the kill: the state to resume from is the one that no longer moves.
	hot, archived := counts()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		h, a := counts()
		if h == hot && a == archived {
			break
		}
		hot, archived = h, a
	}
	t.Logf("killed with %d orders archived, %d hot", archived, hot)
	if hot == 0 {
		t.Fatal("the child archived everything before the kill: nothing was interrupted")
	}
	if hot+archived != n {
		t.Fatalf("after the kill: %d hot + %d archived != %d", hot, archived, n)
	}
	rep, err := e.repo.Archive(ctx, "done", 0)
	if err != nil || rep.HotBefore != hot || rep.ArchivedBefore != archived || rep.HotAfter != 0 || rep.ArchivedAfter != n ||
		rep.Moved != hot || rep.Batches != 1 {
		t.Fatalf("resumed archive = %+v, %v", rep, err)
	}
	if after := e.orders(t, "done"); !reflect.DeepEqual(after, before) {
		t.Fatalf("orders after the resumed archive differ (%d of %d)", len(after), len(before))
	}
	if pays, err := e.repo.Payments(ctx, "done"); err != nil || !reflect.DeepEqual(pays, beforePays) {
		t.Fatalf("payments after the resumed archive differ: %v", err)
	}
}

// A win delivered again after its sale was archived (a consumer's claim, a store restored from a
// backup) finds its archived order on both databases, alone and in a batch with a new win: a
// second order for one win would charge its buyer twice and count its item twice.
func testCreateAfterArchive(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "arch", 4); err != nil {
		t.Fatal(err)
	}
	hour := time.Now().Add(time.Hour)
	first, _, err := e.repo.CreateOrder(ctx, newOrder("arch", "r1", "u1", 1, hour))
	if err != nil {
		t.Fatal(err)
	}
	paid, err := payNow(ctx, e.repo, first.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	second, _, err := e.repo.CreateOrder(ctx, newOrder("arch", "r2", "u2", 1, hour))
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := e.repo.Cancel(ctx, second.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The relay's part: the outbox emptied, so the sale is finished.
	rows, err := e.repo.Outbox(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if err := e.repo.DeleteOutbox(ctx, r.ID); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := e.repo.Archive(ctx, "arch", 0); err != nil || rep.Moved != 2 || rep.HotAfter != 0 {
		t.Fatalf("archive = %+v, %v", rep, err)
	}

	same := func(what string, got Order, created bool, err error, want Order) {
		t.Helper()
		if err != nil || created || got.ID != want.ID || got.Status != want.Status {
			t.Errorf("%s = %s %s, created %v, err %v; want the archived order %s %s", what, got.ID, got.Status, created, err, want.ID, want.Status)
		}
	}
	o, created, err := e.repo.CreateOrder(ctx, newOrder("arch", "r1", "u1", 1, hour))
	same("the paid order's win again", o, created, err, paid)
	o, created, err = e.repo.CreateOrder(ctx, newOrder("arch", "r2", "u2", 1, hour))
	same("the cancelled order's win again", o, created, err, cancelled)
	outs, err := e.repo.CreateOrders(ctx, []NewOrder{
		newOrder("arch", "r1", "u1", 1, hour), newOrder("arch", "r3", "u3", 1, hour), newOrder("arch", "r2", "u2", 1, hour)})
	if err != nil || len(outs) != 3 {
		t.Fatalf("batch with archived wins = %+v, %v", outs, err)
	}
	same("batch: the paid order's win", outs[0].Order, outs[0].Created, outs[0].Err, paid)
	if !outs[1].Created || outs[1].Err != nil || outs[1].Order.ReservationID != "r3" {
		t.Errorf("batch: a new win = %+v, want created", outs[1])
	}
	same("batch: the cancelled order's win", outs[2].Order, outs[2].Created, outs[2].Err, cancelled)
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("arch", "r1", "u9", 1, hour)); !errors.Is(err, ErrConflict) {
		t.Errorf("another buyer's win under an archived reservation: err = %v, want ErrConflict", err)
	}
	if n := len(e.orders(t, "arch")); n != 3 {
		t.Errorf("%d orders, want 3 (two archived, one new)", n)
	}
	if s := mustStock(t, e.repo, "arch"); s.Left != 2 {
		t.Errorf("stock = %+v, want 2 left (one paid, one new)", s)
	}
}

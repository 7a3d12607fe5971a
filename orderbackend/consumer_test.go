package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

var consumerScenarios = []scenario{
	{"ConsumeAll", testConsumeAll},
	{"CrashAfterCommit", testCrashAfterCommit},
	{"CrashBeforeCommit", testCrashBeforeCommit},
	{"PoisonEntry", testPoisonEntry},
	{"PoisonReleaseTimesOut", testPoisonReleaseTimesOut},
	{"RefusedWin", testRefusedWin},
	{"ExpiryRace", testExpiryRace},
	{"CancelRestocks", testCancelRestocks},
	{"ReleaseAfterRedefine", testReleaseAfterRedefine},
	{"ReconcileFindsLostWin", testReconcileFindsLostWin},
	{"SeveralReservations", testSeveralReservations},
}

// A buyer with two reservations (limit 2) finds both orders in the result's Reservations, each
// followed to its end, while the latest record stays the one still in flight.
func testSeveralReservations(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 5, 2, time.Minute)
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	var ds []admission.Decision
	for _, req := range []string{"first", "second"} {
		d, err := e.store.Admit(ctx, admission.Request{Activity: "sale", User: "u1", Qty: 1, RequestID: req})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %s: %+v, %v", req, d, err)
		}
		ds = append(ds, d)
	}
	d1, d2 := ds[0], ds[1]
	pending := func() bool {
		r := e.result(t, "sale", "u1")
		return len(r.Reservations) == 2 && r.Reservations[0].Code == resultPending && r.Reservations[1].Code == resultPending
	}
	eventually(t, "two pending orders in u1's result", pending)
	r := e.result(t, "sale", "u1")
	if r.Reservations[0].ReservationID != d1.ReservationID || r.Reservations[1].ReservationID != d2.ReservationID ||
		r.Reservations[0].OrderID == "" || r.Reservations[0].OrderID == r.Reservations[1].OrderID {
		t.Fatalf("result %+v, want the orders of %s then %s", r, d1.ReservationID, d2.ReservationID)
	}
	if _, err := e.repo.Cancel(ctx, r.Reservations[0].OrderID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.relayAll(t, m)
	r = e.result(t, "sale", "u1")
	if r.Reservations[0].Code != string(StatusCancelled) || r.Reservations[1].Code != resultPending ||
		r.ReservationID != d2.ReservationID || r.Code != resultPending {
		t.Errorf("after cancelling the first: %+v, want it cancelled in the list and the second still the latest", r)
	}
	e.requireReconciled(t, "sale")
}

func testConsumeAll(t *testing.T, e *env) {
	e.openActivity(t, "sale", 30, 2, 15*time.Minute)
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	us := users("u", 20)
	resv := map[string]string{}
	for i, u := range us {
		d := e.admit(t, "sale", u, int64(1+i%2))
		resv[u] = d.ReservationID
	}
	eventually(t, "20 orders", func() bool { return len(e.orders(t, "sale")) == 20 })
	for _, u := range us {
		eventually(t, "result of "+u, func() bool { return e.result(t, "sale", u).Code == resultPending })
		r := e.result(t, "sale", u)
		o, err := e.repo.Order(context.Background(), r.OrderID)
		if err != nil {
			t.Fatalf("result %+v names no order: %v", r, err)
		}
		if o.User != u || o.ReservationID != resv[u] || r.ReservationID != resv[u] || r.PayBeforeMS != o.ExpiresAt.UnixMilli() {
			t.Errorf("result %+v for order %+v", r, o)
		}
	}
	if s := m.Snapshot(); s.OrdersCreated != 20 || s.DeadLettered != 0 {
		t.Errorf("metrics = %+v", s)
	}
	rep := e.requireReconciled(t, "sale")
	if rep.Orders != 20 || rep.Pending != 20 || rep.PendingQty != 30 || rep.DBLeft != 0 {
		t.Errorf("report = %+v", rep)
	}
}

// Issue test 1: the consumer dies after the commit, before the acknowledgement. Its restart
// re-reads its own pending entries first, finds their orders, and makes no second order.
func testCrashAfterCommit(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 5, 1, time.Minute)
	for _, u := range users("u", 3) {
		e.admit(t, "sale", u, 1)
	}
	// The first life of consumer c1: read, commit, die.
	if err := e.store.EnsureGroup(ctx, "sale", DefaultGroup); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.EnsureStock(ctx, "sale", 5); err != nil {
		t.Fatal(err)
	}
	ws, err := e.store.ReadGroup(ctx, "sale", DefaultGroup, "c1", 10, 0, false)
	if err != nil || len(ws) != 3 {
		t.Fatalf("read = %+v, %v", ws, err)
	}
	first := map[string]string{}
	for _, w := range ws {
		o, _, err := e.repo.CreateOrder(ctx, NewOrder{ID: NewOrderID(), Activity: w.Activity, ReservationID: w.ReservationID,
			User: w.User, Qty: w.Qty, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		first[w.ReservationID] = o.ID
	}

	// Its second life.
	m := new(Metrics)
	opts := e.consumerOpts("c1", m)
	opts.ClaimIdle = time.Hour // nothing here may come from a claim
	e.startConsumer(t, "sale", opts)
	eventually(t, "3 redeliveries acknowledged", func() bool { return m.Redelivered.Load() == 3 })
	orders := e.orders(t, "sale")
	if len(orders) != 3 {
		t.Fatalf("%d orders, want 3", len(orders))
	}
	for _, o := range orders {
		if first[o.ReservationID] != o.ID {
			t.Errorf("order %s for %s is not the one committed before the crash", o.ID, o.ReservationID)
		}
		// The counters move when a batch's outcomes are known; the results are written after
		// (and acknowledged last), so they are waited for.
		eventually(t, "result of "+o.User, func() bool {
			r := e.result(t, "sale", o.User)
			return r.Code == resultPending && r.OrderID == o.ID
		})
	}
	if m.OrdersCreated.Load() != 0 {
		t.Errorf("%d orders created after the restart", m.OrdersCreated.Load())
	}
	eventually(t, "nothing pending", func() bool {
		p, err := e.store.ReadGroup(ctx, "sale", DefaultGroup, "c1", 10, 0, true)
		return err == nil && len(p) == 0
	})
	e.requireReconciled(t, "sale")
}

// Issue test 2: a consumer dies before its commit. Another consumer claims its entries once
// they have been idle long enough and makes one order of each.
func testCrashBeforeCommit(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 5, 1, time.Minute)
	for _, u := range users("u", 3) {
		e.admit(t, "sale", u, 1)
	}
	if err := e.store.EnsureGroup(ctx, "sale", DefaultGroup); err != nil {
		t.Fatal(err)
	}
	ws, err := e.store.ReadGroup(ctx, "sale", DefaultGroup, "dead", 10, 0, false)
	if err != nil || len(ws) != 3 {
		t.Fatalf("read = %+v, %v", ws, err)
	}
	// "dead" never commits and never comes back.
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c2", m))
	eventually(t, "3 orders", func() bool { return len(e.orders(t, "sale")) == 3 })
	eventually(t, "3 acknowledged", func() bool { return m.OrdersCreated.Load() == 3 })
	for _, o := range e.orders(t, "sale") {
		eventually(t, "result", func() bool { return e.result(t, "sale", o.User).OrderID == o.ID })
	}
	e.requireReconciled(t, "sale")
}

// poisonTrigger makes the database refuse any order of user "poison", the way a bug or a bad
// value would: a real failure of the real transaction, every time.
func poisonTrigger(t *testing.T, e *env) {
	e.exec(t, `CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.user_id = 'poison' THEN RAISE EXCEPTION 'poisoned order'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER poison BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION poison();`,
		`CREATE TRIGGER poison BEFORE INSERT ON orders WHEN NEW.user_id = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poisoned order'); END;`)
}

// Issue test 3: an entry that fails every time goes to the dead-letter queue after MaxDeliveries,
// is acknowledged and reported; its items go back to the store; reconcile still passes.
func testPoisonEntry(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 3, 1, time.Minute)
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	eventually(t, "stock row", func() bool { _, err := e.repo.Stock(ctx, "sale"); return err == nil })
	poisonTrigger(t, e)
	e.admit(t, "sale", "u1", 1)
	bad := e.admit(t, "sale", "poison", 1)
	e.admit(t, "sale", "u2", 1)

	eventually(t, "a dead letter", func() bool { return m.DeadLettered.Load() == 1 })
	dead, err := e.store.DeadLetters(ctx, "sale", 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	if d := dead[0]; d.ReservationID != bad.ReservationID || d.Deliveries != 3 || !strings.HasPrefix(d.Reason, reasonPoison) ||
		!strings.Contains(d.Reason, "poisoned order") {
		t.Errorf("dead letter = %+v", d)
	}
	eventually(t, "2 orders", func() bool { return len(e.orders(t, "sale")) == 2 })
	eventually(t, "poison result", func() bool { return e.result(t, "sale", "poison").Code == resultFailed })
	// Acknowledged: nothing is pending for anyone in the group.
	for _, c := range []string{"c1", "other"} {
		if p, _ := e.store.ReadGroup(ctx, "sale", DefaultGroup, c, 10, 0, true); len(p) != 0 {
			t.Errorf("%s still has pending entries %+v", c, p)
		}
	}
	if m.Released.Load() != 1 {
		t.Errorf("released %d reservations, want the poison's 1", m.Released.Load())
	}
	rep := e.requireReconciled(t, "sale")
	if rep.DeadLetters != 1 || rep.StoreRemaining != 1 || rep.DBLeft != 1 {
		t.Errorf("report = %+v", rep)
	}
	// The poison's item sells again.
	e.admit(t, "sale", "u3", 1)
	eventually(t, "3 orders", func() bool { return len(e.orders(t, "sale")) == 3 })
	eventually(t, "u3 result", func() bool { return e.result(t, "sale", "u3").Code == resultPending })
	e.requireReconciled(t, "sale")
}

// timeoutOnce is the env's store whose first Release times out without effect, as a store local
// commit that outlived the wait and then failed.
type timeoutOnce struct {
	admission.Store
	done atomic.Bool
}

func (s *timeoutOnce) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if s.done.CompareAndSwap(false, true) {
		return false, fmt.Errorf("release %s/%s: %w", activity, reservationID, localstore.ErrWaitTimeout)
	}
	return s.Store.Release(ctx, activity, reservationID)
}

// A poison win's release that times out in the store is tried again, not taken for "nothing to
// release": a store that is slow is no definite answer, and the item would never sell again
// (found in review).
func testPoisonReleaseTimesOut(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 3, 1, time.Minute)
	m := new(Metrics)
	slow := &timeoutOnce{Store: e.store}
	e.startConsumerOn(t, slow, "sale", e.consumerOpts("c1", m))
	eventually(t, "stock row", func() bool { _, err := e.repo.Stock(ctx, "sale"); return err == nil })
	poisonTrigger(t, e)
	e.admit(t, "sale", "poison", 1)
	eventually(t, "the poison released", func() bool { return m.Released.Load() == 1 })
	if !slow.done.Load() {
		t.Fatal("the release never met the timeout")
	}
	if n, err := e.store.Remaining(ctx, "sale"); err != nil || n != 3 {
		t.Errorf("remaining %d, %v; want 3: the poison's item back", n, err)
	}
	e.requireReconciled(t, "sale")
}

// A win the database stock guard refuses is dead-lettered at once and not released; reconcile
// reports the disagreement that made it possible.
func testRefusedWin(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 3, 1, time.Minute)
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	eventually(t, "stock row", func() bool { _, err := e.repo.Stock(ctx, "sale"); return err == nil })
	e.exec(t, `UPDATE stock SET "left" = 0`, `UPDATE stock SET "left" = 0`) // someone sold it elsewhere
	d := e.admit(t, "sale", "u1", 1)
	eventually(t, "a refused win", func() bool { return m.Refused.Load() == 1 })
	dead, _ := e.store.DeadLetters(ctx, "sale", 10)
	if len(dead) != 1 || dead[0].ReservationID != d.ReservationID || dead[0].Deliveries != 1 ||
		!strings.HasPrefix(dead[0].Reason, reasonRefused) {
		t.Errorf("dead letters = %+v", dead)
	}
	eventually(t, "failed result", func() bool { return e.result(t, "sale", "u1").Code == resultFailed })
	if m.Released.Load() != 0 {
		t.Error("a refused win was released")
	}
	rep := e.reconcile(t, "sale")
	if !hasViolation(rep, "store remaining 2 != database left 0") {
		t.Errorf("reconcile missed the disagreement:\n%s", rep)
	}
}

// Issue test 4: four sweepers and a stream of payments race at the expiry instant. Every order
// ends in exactly one final state, each cancelled order's stock is released exactly once, and
// reconcile passes.
func testExpiryRace(t *testing.T, e *env) {
	ctx := context.Background()
	const n = 40
	e.openActivity(t, "sale", n, 1, 1500*time.Millisecond)
	m := new(Metrics)
	stopConsumer := e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	for _, u := range users("u", n) {
		e.admit(t, "sale", u, 1)
	}
	eventually(t, "all orders", func() bool { return len(e.orders(t, "sale")) == n })
	eventually(t, "all acknowledged", func() bool { return m.OrdersCreated.Load() == n })
	stopConsumer()
	orders := e.orders(t, "sale")

	stopAll := make(chan struct{})
	var sweepers, payers sync.WaitGroup
	var stopRelays []func()
	for i := range 4 {
		relay := NewRelay(e.store, e.repo, RelayOptions{Every: 5 * time.Millisecond, Logger: e.log, Metrics: m})
		stopRelays = append(stopRelays, start(t, relay.Run))
		repo := e.repo
		if i%2 == 1 {
			repo = e.openRepo(t) // another node
		}
		sw := NewSweeper(repo, SweeperOptions{Batch: 3, Logger: e.log, Metrics: m, OnCancel: relay.Wake})
		sweepers.Add(1)
		go func() {
			defer sweepers.Done()
			for {
				select {
				case <-stopAll:
					return
				default:
				}
				if _, err := sw.Once(ctx); err != nil {
					t.Errorf("sweep: %v", err)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	paid := make([]bool, len(orders))
	for i, o := range orders {
		payers.Add(1)
		go func() {
			defer payers.Done()
			// Aim at the instant: some a little early, some exactly on it, some late (scheduling
			// on a busy machine adds its own jitter).
			at := o.ExpiresAt.Add(time.Duration(i%9-4) * 5 * time.Millisecond)
			time.Sleep(time.Until(at))
			_, err := payNow(ctx, e.repo, o.ID, time.Now())
			switch {
			case err == nil:
				paid[i] = true
			case errors.Is(err, ErrExpired):
			default:
				t.Errorf("pay %s: %v", o.ID, err)
			}
		}()
	}
	payers.Wait()
	eventually(t, "no pending order", func() bool {
		for _, o := range e.orders(t, "sale") {
			if o.Status == StatusPending {
				return false
			}
		}
		return true
	})
	close(stopAll)
	sweepers.Wait()
	for _, stop := range stopRelays {
		stop()
	}
	e.relayAll(t, m)

	var nPaid, nCancelled int64
	for i, o := range orders {
		got, err := e.repo.Order(ctx, o.ID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case paid[i] && got.Status != StatusPaid:
			t.Errorf("order %s was paid successfully but is %s", o.ID, got.Status)
		case !paid[i] && got.Status != StatusCancelled:
			t.Errorf("order %s payment was refused but is %s", o.ID, got.Status)
		}
		if paid[i] {
			nPaid++
		} else {
			nCancelled++
		}
		want := string(got.Status)
		eventually(t, "result of "+o.User, func() bool { return e.result(t, "sale", o.User).Code == want })
	}
	t.Logf("%d paid, %d cancelled at the expiry instant", nPaid, nCancelled)
	if m.Expired.Load() != nCancelled || m.Released.Load() != nCancelled {
		t.Errorf("%d cancelled but %d expirations and %d releases counted", nCancelled, m.Expired.Load(), m.Released.Load())
	}
	rep := e.requireReconciled(t, "sale")
	if rep.StoreRemaining != nCancelled || rep.DBLeft != nCancelled || rep.Paid != nPaid {
		t.Errorf("report = %+v", rep)
	}
}

// An owner's cancel gives the item back through the outbox; a third buyer then buys it.
func testCancelRestocks(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 1, 1, time.Minute)
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	e.admit(t, "sale", "u1", 1)
	if d, _ := e.store.Admit(ctx, admission.Request{Activity: "sale", User: "u2", Qty: 1, RequestID: "x"}); d.Outcome != admission.SoldOut {
		t.Fatalf("second buyer = %v, want sold out", d.Outcome)
	}
	eventually(t, "u1's order", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	o, err := e.repo.Cancel(ctx, e.result(t, "sale", "u1").OrderID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e.relayAll(t, m)
	if r := e.result(t, "sale", "u1"); r.Code != string(StatusCancelled) || r.OrderID != o.ID {
		t.Errorf("result after cancel = %+v", r)
	}
	e.admit(t, "sale", "u3", 1)
	eventually(t, "u3's order", func() bool { return e.result(t, "sale", "u3").Code == resultPending })
	rep := e.requireReconciled(t, "sale")
	if rep.Cancelled != 1 || rep.Pending != 1 || rep.DBLeft != 0 {
		t.Errorf("report = %+v", rep)
	}
}

// A cancelled order whose activity was deleted and defined again: the store answers its release
// unknown (NOT_FOUND, or UNKNOWN_ACTIVITY in the old bucket's keys), which is final: the relay
// counts it, drops the row (the outbox goes on) and gives the new sale nothing. A cancel of the
// new sale's order is released as usual. With buckets the new definition has another count, so
// the old reservation names a bucket of other keys.
func testReleaseAfterRedefine(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 2, 1, time.Minute)
	m := new(Metrics)
	stop := e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1's order", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	stop()
	old := e.result(t, "sale", "u1")
	if err := e.store.Delete(ctx, "sale", true); err != nil {
		t.Fatal(err)
	}
	e.openActivity(t, "sale", 3, 1, time.Minute)
	if _, err := e.repo.Cancel(ctx, old.OrderID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.relayAll(t, m)
	if got := m.ReleaseUnknown.Load(); got != 1 || m.Released.Load() != 0 {
		t.Errorf("release of the deleted sale's order: %d unknown, %d released; want 1 and 0", got, m.Released.Load())
	}
	if rows, err := e.repo.Outbox(ctx, 10); err != nil || len(rows) != 0 {
		t.Errorf("outbox after the relay: %v, %v; want empty", rows, err)
	}
	if left, err := e.store.Remaining(ctx, "sale"); err != nil || left != 3 {
		t.Errorf("the new sale's remaining: %d, %v; want its own 3", left, err)
	}

	e.startConsumer(t, "sale", e.consumerOpts("c2", m))
	e.admit(t, "sale", "u2", 1)
	eventually(t, "u2's order", func() bool { return e.result(t, "sale", "u2").Code == resultPending })
	if _, err := e.repo.Cancel(ctx, e.result(t, "sale", "u2").OrderID, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.relayAll(t, m)
	if m.ReleaseUnknown.Load() != 1 || m.Released.Load() != 1 {
		t.Errorf("release of the new sale's order: %d unknown, %d released; want 1 and 1", m.ReleaseUnknown.Load(), m.Released.Load())
	}
	if left, err := e.store.Remaining(ctx, "sale"); err != nil || left != 3 {
		t.Errorf("remaining after the release: %d, %v; want 3", left, err)
	}
}

// Reconcile is not a test that cannot fail: a win without an order, and a deleted order, are
// reported.
func testReconcileFindsLostWin(t *testing.T, e *env) {
	e.openActivity(t, "sale", 5, 1, time.Minute)
	m := new(Metrics)
	stop := e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	e.admit(t, "sale", "u1", 1)
	eventually(t, "order", func() bool { return m.OrdersCreated.Load() == 1 })
	stop()
	e.requireReconciled(t, "sale")

	e.admit(t, "sale", "u2", 1) // no consumer: the win is not an order yet
	if rep := e.reconcile(t, "sale"); !hasViolation(rep, "1 wins are neither an order nor a dead letter") {
		t.Errorf("reconcile missed an unprocessed win:\n%s", rep)
	}
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	eventually(t, "second order", func() bool { return m.OrdersCreated.Load() == 2 })
	e.requireReconciled(t, "sale")

	e.exec(t, `DELETE FROM orders WHERE user_id = 'u2'`, `DELETE FROM orders WHERE user_id = 'u2'`)
	rep := e.reconcile(t, "sale")
	if !hasViolation(rep, "1 wins are neither") || !hasViolation(rep, "database total 5 != left 3") {
		t.Errorf("reconcile missed a lost order:\n%s", rep)
	}
}

// Issue test 5: PostgreSQL stops mid-sale. Admission goes on; the consumers wait the outage out
// without dead-lettering anything, and the backlog drains when it returns. The outage lasts 3 s,
// or 30 s with SECKILL_LONG_OUTAGE=1.
func testPostgresOutage(t *testing.T, e *env) {
	outage := 3 * time.Second
	if os.Getenv("SECKILL_LONG_OUTAGE") == "1" {
		outage = 30 * time.Second
	}
	e.openActivity(t, "sale", 40, 1, 15*time.Minute)
	m := new(Metrics)
	// Two consumers, as two nodes would run: both wait the outage out, and a database outage is
	// never counted against MaxDeliveries.
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	e.startConsumer(t, "sale", e.consumerOpts("c2", m))
	us := users("u", 40)
	for _, u := range us[:10] {
		e.admit(t, "sale", u, 1)
	}
	eventually(t, "10 orders", func() bool { return m.OrdersCreated.Load() == 10 })

	e.pg.Stop()
	for _, u := range us[10:] {
		e.admit(t, "sale", u, 1)
		time.Sleep(outage / 40)
	}
	time.Sleep(outage / 4)
	if _, err := e.repo.Stock(context.Background(), "sale"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("during the outage: err = %v, want ErrUnavailable", err)
	}
	e.pg.Start()

	eventually(t, "40 orders", func() bool { return m.OrdersCreated.Load() == 40 })
	for _, u := range us {
		eventually(t, "result of "+u, func() bool { return e.result(t, "sale", u).Code == resultPending })
	}
	if m.DeadLettered.Load() != 0 {
		t.Errorf("%d entries dead-lettered by an outage", m.DeadLettered.Load())
	}
	t.Logf("retries during the outage: %d", m.Retries.Load())
	rep := e.requireReconciled(t, "sale")
	if rep.Orders != 40 || rep.DBLeft != 0 || rep.StoreRemaining != 0 {
		t.Errorf("report = %+v", rep)
	}
}

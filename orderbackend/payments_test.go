package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/money"
)

// recorder is a payment provider that remembers, by idempotency key, what it charged and refunded,
// as a real provider does, and can be told to misbehave: decline, fail before charging, or charge
// and then lose its answer.
type recorder struct {
	mu       sync.Mutex
	charges  map[string]money.Price // key → amount taken
	refunds  map[string]int         // key → refunds asked (the provider gives back once)
	calls    int                    // Charge calls
	decline  bool                   // answer every charge ChargeFailed
	down     bool                   // every call fails without doing anything
	loseNext bool                   // the next charge takes the money, then answers an error
}

var errProviderDown = errors.New("provider unreachable")

func newRecorder() *recorder {
	return &recorder{charges: map[string]money.Price{}, refunds: map[string]int{}}
}

func (r *recorder) Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	switch {
	case r.down:
		return ChargeResult{}, errProviderDown
	case r.decline:
		return ChargeResult{Outcome: ChargeFailed}, nil
	}
	if _, ok := r.charges[c.Key]; !ok {
		r.charges[c.Key] = c.Amount
	}
	if r.loseNext {
		r.loseNext = false
		return ChargeResult{}, errors.New("answer lost")
	}
	return ChargeResult{Outcome: ChargeSucceeded, Ref: "ch_" + c.Key}, nil
}

func (r *recorder) Lookup(ctx context.Context, key string) (ChargeResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return ChargeResult{}, errProviderDown
	}
	if _, ok := r.charges[key]; ok {
		return ChargeResult{Outcome: ChargeSucceeded, Ref: "ch_" + key}, nil
	}
	return ChargeResult{Outcome: ChargeFailed}, nil
}

func (r *recorder) Refund(ctx context.Context, key, ref string, amount money.Price) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.down {
		return errProviderDown
	}
	if got, ok := r.charges[key]; !ok || got != amount || ref != "ch_"+key {
		return fmt.Errorf("refund of %s %s (%s): no such charge", key, amount, ref)
	}
	r.refunds[key]++
	return nil
}

func (r *recorder) set(f func(r *recorder)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(r)
}

// Charged counts the charges of an order (one per attempt that took money).
func (r *recorder) Charged(orderID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k := range r.charges {
		if strings.HasPrefix(k, orderID+"-") {
			n++
		}
	}
	return n
}

// Refunded counts the refunds asked for an order's charges.
func (r *recorder) Refunded(orderID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for k, c := range r.refunds {
		if strings.HasPrefix(k, orderID+"-") {
			n += c
		}
	}
	return n
}

// payNow pays an order as the API does with a provider that succeeds at once: an attempt, then
// its success. A success the order can no longer take is refunded and answered ErrExpired.
func payNow(ctx context.Context, repo Repository, id string, now time.Time) (Order, error) {
	p, err := repo.StartPayment(ctx, id, now)
	if err != nil {
		return Order{}, err
	}
	p, o, err := repo.SettlePayment(ctx, p.Key, ChargeSucceeded, "ch_"+p.Key, now)
	if err != nil || p.Status == PaymentSucceeded {
		return o, err
	}
	if _, err := repo.MarkRefunded(ctx, p.Key, now); err != nil {
		return o, err
	}
	return o, fmt.Errorf("pay %s: payment %s refunded: %w", id, p.Key, ErrExpired)
}

var paymentScenarios = []scenario{
	{"PaymentAttempts", testPaymentAttempts},
	{"MigrateExistingDatabase", testMigrateExisting},
	{"LostChargeAnswerSettled", testLostChargeAnswerSettled},
	{"LostChargeAfterWindowRefunded", testLostChargeAfterWindowRefunded},
	{"DeclinedThenPaid", testDeclinedThenPaid},
	{"ConcurrentPaysChargeOnce", testConcurrentPaysChargeOnce},
	{"KillBetweenChargeAndPaid", testKillBetweenChargeAndPaid},
	{"RetryNotLookedUpInFlight", testRetryNotLookedUpInFlight},
	{"RefundNotStarvedByPending", testRefundNotStarvedByPending},
	{"RefundNotStarvedByFailingLookups", testRefundNotStarvedByFailingLookups},
}

// The repository's payment record: an attempt before the charge, its key reused until it has an
// outcome, a success that pays once, a late success refunded once, and nothing that moves a paid
// order or a charged attempt back.
func testPaymentAttempts(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Millisecond)
	exp := now.Add(time.Minute)
	n := newOrder("a", "r1", "u1", 2, exp)
	n.Amount, n.Title = money.Price{Amount: 39800, Currency: "USD"}, "Phone"
	o, _, err := e.repo.CreateOrder(ctx, n)
	if err != nil || o.Amount != n.Amount || o.Title != "Phone" {
		t.Fatalf("create = %+v, %v", o, err)
	}
	if got, _ := e.repo.Order(ctx, o.ID); got.Amount != n.Amount || got.Title != "Phone" {
		t.Fatalf("stored order = %+v", got)
	}

	p1, err := e.repo.StartPayment(ctx, o.ID, now)
	if err != nil || p1.Key != o.ID+"-1" || p1.Attempt != 1 || p1.Status != PaymentStarted || p1.Amount != n.Amount {
		t.Fatalf("start = %+v, %v", p1, err)
	}
	// A retry without outcome charges under the same key.
	if again, err := e.repo.StartPayment(ctx, o.ID, now); err != nil || again.Key != p1.Key {
		t.Fatalf("second start = %+v, %v; want the open attempt again", again, err)
	}
	// Declined: the next start is a new attempt.
	if p, _, err := e.repo.SettlePayment(ctx, p1.Key, ChargeFailed, "", now); err != nil || p.Status != PaymentFailed {
		t.Fatalf("decline = %+v, %v", p, err)
	}
	p2, err := e.repo.StartPayment(ctx, o.ID, now)
	if err != nil || p2.Key != o.ID+"-2" {
		t.Fatalf("start after decline = %+v, %v", p2, err)
	}
	// Pending (a provider that confirms later) leaves it open.
	if p, _, err := e.repo.SettlePayment(ctx, p2.Key, ChargePending, "", now); err != nil || p.Status != PaymentStarted {
		t.Fatalf("pending = %+v, %v", p, err)
	}
	paid := now.Add(time.Second)
	p, po, err := e.repo.SettlePayment(ctx, p2.Key, ChargeSucceeded, "ch_2", paid)
	if err != nil || p.Status != PaymentSucceeded || p.ProviderRef != "ch_2" || po.Status != StatusPaid || po.PaymentRef != p2.Key {
		t.Fatalf("success = %+v %+v, %v", p, po, err)
	}
	// A replayed success, and a late failure, change nothing.
	for _, out := range []ChargeOutcome{ChargeSucceeded, ChargeFailed} {
		if p, po, err := e.repo.SettlePayment(ctx, p2.Key, out, "other", paid.Add(time.Hour)); err != nil ||
			p.Status != PaymentSucceeded || p.ProviderRef != "ch_2" || po.Status != StatusPaid || !po.PaidAt.Equal(paid) {
			t.Fatalf("replayed %s = %+v %+v, %v", out, p, po, err)
		}
	}
	// The declined first attempt succeeds after all (a late notification): the order is paid by
	// the second, so this charge is due back, once.
	p, po, err = e.repo.SettlePayment(ctx, p1.Key, ChargeSucceeded, "ch_1", paid)
	if err != nil || p.Status != PaymentRefundDue || po.Status != StatusPaid || po.PaymentRef != p2.Key {
		t.Fatalf("late success = %+v %+v, %v", p, po, err)
	}
	if open, err := e.repo.OpenPayments(ctx, now.Add(-time.Hour), 10); err != nil || len(open) != 1 || open[0].Key != p1.Key {
		t.Fatalf("open payments = %+v, %v; want the refund due", open, err)
	}
	if _, err := e.repo.MarkRefunded(ctx, p2.Key, paid); !errors.Is(err, ErrNotRefundable) {
		t.Errorf("refund of the paying charge: %v, want ErrNotRefundable", err)
	}
	for range 2 {
		if p, err := e.repo.MarkRefunded(ctx, p1.Key, paid); err != nil || p.Status != PaymentRefunded {
			t.Fatalf("mark refunded = %+v, %v", p, err)
		}
	}
	if p, _, err := e.repo.SettlePayment(ctx, p1.Key, ChargeSucceeded, "ch_1", paid); err != nil || p.Status != PaymentRefunded {
		t.Errorf("success replayed after the refund = %+v, %v", p, err)
	}
	if _, err := e.repo.StartPayment(ctx, o.ID, paid); !errors.Is(err, ErrNotPending) {
		t.Errorf("start on a paid order: %v", err)
	}
	if _, _, err := e.repo.SettlePayment(ctx, "nope-1", ChargeSucceeded, "", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("settle unknown: %v", err)
	}
	if _, err := e.repo.MarkRefunded(ctx, "nope-1", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("refund unknown: %v", err)
	}

	// An attempt open when the window closes: the sweep cancels the order, and the success that
	// arrives afterwards is due back.
	b, _, _ := e.repo.CreateOrder(ctx, newOrder("a", "r2", "u2", 1, exp))
	pb, err := e.repo.StartPayment(ctx, b.ID, exp.Add(-time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.repo.StartPayment(ctx, b.ID, exp); !errors.Is(err, ErrExpired) {
		t.Errorf("start at the window's end: %v, want ErrExpired", err)
	}
	if open, _ := e.repo.OpenPayments(ctx, exp.Add(-time.Hour), 10); len(open) != 0 {
		t.Errorf("an attempt younger than the age asked is open: %+v", open)
	}
	if open, _ := e.repo.OpenPayments(ctx, exp, 10); len(open) != 1 || open[0].Key != pb.Key {
		t.Errorf("open payments = %+v, want b's attempt", open)
	}
	if got, err := e.repo.CancelExpired(ctx, exp, 10); err != nil || len(got) != 1 {
		t.Fatalf("sweep = %+v, %v", got, err)
	}
	p, bo, err := e.repo.SettlePayment(ctx, pb.Key, ChargeSucceeded, "ch_b", exp)
	if err != nil || p.Status != PaymentRefundDue || bo.Status != StatusCancelled {
		t.Fatalf("success after the sweep = %+v %+v, %v", p, bo, err)
	}
	ps, err := e.repo.Payments(ctx, "a")
	if err != nil || len(ps) != 3 {
		t.Fatalf("payments = %+v, %v", ps, err)
	}
	r := Report{}
	r.reconcileMoney(e.orders(t, "a"), ps)
	if r.Charges != 3 || r.Refunds != 1 || r.ChargedUnpaid != 1 || r.ChargedAmount != 39800*2 || r.Currency != "USD" {
		t.Errorf("money = %+v", r)
	}
}

// A database made before payments were recorded migrates: its orders stay, without a price, and
// can be paid.
func testMigrateExisting(t *testing.T, e *env) {
	ctx := context.Background()
	ms, err := migrations(map[bool]string{true: "postgres", false: "sqlite"}[e.pg != nil])
	if err != nil || ms[0].version != "0001_init" {
		t.Fatal(ms, err)
	}
	old := &env{pg: e.pg}
	kind := "sqlite"
	if e.pg != nil {
		kind = "postgres"
		old.dsn = e.pg.Database(t, fmt.Sprintf("old%d", dbSeq.Add(1)))
		old.exec(t, ms[0].sql+`; CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
			INSERT INTO schema_migrations (version) VALUES ('0001_init');
			INSERT INTO stock VALUES ('a', 5, 4);
			INSERT INTO orders (id, reservation_id, activity, user_id, qty, status, created_at, expires_at)
			VALUES ('o1', 'r1', 'a', 'u1', 1, 'pending_payment', now(), now() + interval '1 hour')`, "")
	} else {
		old.dsn = filepath.Join(t.TempDir(), "old.db")
		exp := time.Now().Add(time.Hour).UnixMilli()
		old.exec(t, "", ms[0].sql+fmt.Sprintf(`; CREATE TABLE schema_migrations (version TEXT PRIMARY KEY, applied_at INTEGER NOT NULL);
			INSERT INTO schema_migrations VALUES ('0001_init', 0);
			INSERT INTO stock VALUES ('a', 5, 4);
			INSERT INTO orders (id, reservation_id, activity, user_id, qty, status, created_at, expires_at)
			VALUES ('o1', 'r1', 'a', 'u1', 1, 'pending_payment', 0, %d)`, exp))
	}
	repo, err := OpenRepository(ctx, kind, old.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	o, err := repo.Order(ctx, "o1")
	if err != nil || !o.Amount.IsZero() || o.Title != "" || o.Status != StatusPending {
		t.Fatalf("migrated order = %+v, %v", o, err)
	}
	if o, err := payNow(ctx, repo, "o1", time.Now()); err != nil || o.Status != StatusPaid {
		t.Fatalf("pay after migration = %+v, %v", o, err)
	}
}

// The provider takes the money and its answer is lost (a timeout, a broken connection): the buyer
// gets 503 and does not retry; the sweeper asks the provider by the attempt's key and pays the
// order, which is still in its window.
func testLostChargeAnswerSettled(t *testing.T, e *env) {
	e.openActivity(t, "sale", 1, 1, time.Hour)
	pay := newRecorder()
	pay.loseNext = true
	_, srv := e.startBackend(t, pay, time.Second)
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	id := e.result(t, "sale", "u1").OrderID
	expect(t, srv, "POST", "/orders/"+id+"/pay", token(t, "u1"), 503, "busy")
	eventually(t, "u1 paid by the sweeper", func() bool { return e.result(t, "sale", "u1").Code == "paid" })
	r := e.eventuallyReconciled(t, "sale")
	if r.Charges != 1 || r.Refunds != 0 || r.Paid != 1 || pay.Charged(id) != 1 || pay.Refunded(id) != 0 {
		t.Errorf("report %+v; charged %d refunded %d", r, pay.Charged(id), pay.Refunded(id))
	}
}

// The charge's answer is lost and the provider is then unreachable until the window has closed:
// the sweeper cancels the order (its item is sold again), and once the provider answers it finds
// the charge and refunds it, once.
func testLostChargeAfterWindowRefunded(t *testing.T, e *env) {
	e.openActivity(t, "sale", 1, 1, 2*time.Second)
	pay := newRecorder()
	pay.loseNext = true
	b, srv := e.startBackend(t, pay, time.Second)
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	id := e.result(t, "sale", "u1").OrderID
	expect(t, srv, "POST", "/orders/"+id+"/pay", token(t, "u1"), 503, "busy")
	pay.set(func(r *recorder) { r.down = true })
	eventually(t, "u1 cancelled", func() bool { return e.result(t, "sale", "u1").Code == "cancelled" })
	r := e.reconcile(t, "sale")
	if r.UnsettledPayments != 1 || !hasViolation(r, "no outcome yet") {
		t.Errorf("while the provider is down: %+v", r)
	}
	eventually(t, "stock back", func() bool { n, _ := e.store.Remaining(context.Background(), "sale"); return n == 1 })
	e.admit(t, "sale", "u2", 1) // the item is sold again
	pay.set(func(r *recorder) { r.down = false })
	eventually(t, "refunded", func() bool { return pay.Refunded(id) == 1 })
	r = e.eventuallyReconciled(t, "sale")
	t.Logf("reconcile after the provider came back:\n%s", r)
	if r.Charges != 1 || r.Refunds != 1 || r.ChargedUnpaid != 0 || pay.Charged(id) != 1 || pay.Refunded(id) != 1 ||
		r.ChargedAmount != 19900 || r.RefundedAmount != 19900 || r.Currency != "USD" {
		t.Errorf("report %+v; charged %d refunded %d", r, pay.Charged(id), pay.Refunded(id))
	}
	if m := b.Metrics(); m.Refunds != 1 || m.PaymentErrors == 0 {
		t.Errorf("metrics %+v: want 1 refund and the failed lookups counted", m)
	}
}

// A declined charge is 402 and takes nothing; the buyer pays with a new attempt.
func testDeclinedThenPaid(t *testing.T, e *env) {
	e.openActivity(t, "sale", 1, 1, time.Hour)
	pay := newRecorder()
	pay.decline = true
	_, srv := e.startBackend(t, pay, time.Hour)
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	id, tok := e.result(t, "sale", "u1").OrderID, token(t, "u1")
	expect(t, srv, "POST", "/orders/"+id+"/pay", tok, 402, "payment_declined")
	pay.set(func(r *recorder) { r.decline = false })
	body := expect(t, srv, "POST", "/orders/"+id+"/pay", tok, 200, "paid")
	if o, _ := e.repo.Order(context.Background(), id); o.PaymentRef != id+"-2" {
		t.Errorf("paid by %q, want the second attempt; body %v", o.PaymentRef, body)
	}
	r := e.eventuallyReconciled(t, "sale")
	if r.Charges != 1 || pay.Charged(id) != 1 {
		t.Errorf("report %+v", r)
	}
}

// slowCharges holds every Charge until released, so that calls overlap.
type slowCharges struct {
	*recorder
	release chan struct{}
}

func (s slowCharges) Charge(ctx context.Context, c ChargeRequest) (ChargeResult, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return ChargeResult{}, ctx.Err()
	}
	return s.recorder.Charge(ctx, c)
}

// A buyer who clicks pay several times at once: every call charges the one open attempt under
// its key, so the provider takes the money once, and every call answers paid.
func testConcurrentPaysChargeOnce(t *testing.T, e *env) {
	e.openActivity(t, "sale", 1, 1, time.Hour)
	pay := slowCharges{newRecorder(), make(chan struct{})}
	_, srv := e.startBackend(t, pay, time.Hour)
	e.admit(t, "sale", "u1", 1)
	eventually(t, "u1 pending", func() bool { return e.result(t, "sale", "u1").Code == resultPending })
	id, tok := e.result(t, "sale", "u1").OrderID, token(t, "u1")
	const n = 4
	codes := make(chan int, n)
	for range n {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders/"+id+"/pay", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := srv.Client().Do(req)
			if err != nil {
				codes <- 0
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	eventually(t, "the attempt recorded", func() bool {
		ps, _ := e.repo.Payments(context.Background(), "sale")
		return len(ps) == 1
	})
	close(pay.release)
	for range n {
		if c := <-codes; c != http.StatusOK {
			t.Errorf("a pay call answered %d, want 200", c)
		}
	}
	ps, err := e.repo.Payments(context.Background(), "sale")
	if err != nil || len(ps) != 1 || ps[0].Status != PaymentSucceeded || pay.Charged(id) != 1 || pay.Refunded(id) != 0 {
		t.Fatalf("payments %+v, %v; charged %d refunded %d", ps, err, pay.Charged(id), pay.Refunded(id))
	}
	e.eventuallyReconciled(t, "sale")
}

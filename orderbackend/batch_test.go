package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Scenarios of CreateOrders and of the consumer's batches; they run on both env kinds.
var batchScenarios = []scenario{
	{"CreateOrdersAllNew", testCreateOrdersAllNew},
	{"CreateOrdersMixed", testCreateOrdersMixed},
	{"CreateOrdersNoStockRow", testCreateOrdersNoStockRow},
	{"CreateOrdersRollsBack", testCreateOrdersRollsBack},
	{"CreateOrdersConcurrent", testCreateOrdersConcurrent},
	{"CreateOrdersManyActivities", testCreateOrdersManyActivities},
	{"ConsumerOneBatch", testConsumerOneBatch},
	{"ConsumerBatchRunsOut", testConsumerBatchRunsOut},
	{"ConsumerBatchPoison", testConsumerBatchPoison},
	{"ConsumerLinger", testConsumerLinger},
}

func mustCreateOrders(t *testing.T, r Repository, ns []NewOrder) []CreateOutcome {
	t.Helper()
	outs, err := r.CreateOrders(context.Background(), ns)
	if err != nil {
		t.Fatalf("create orders: %v", err)
	}
	if len(outs) != len(ns) {
		t.Fatalf("%d outcomes for %d wins", len(outs), len(ns))
	}
	return outs
}

func testCreateOrdersAllNew(t *testing.T, e *env) {
	ctx := context.Background()
	// Enough stock that the redeliveries below fit too: they must not take it.
	if err := e.repo.EnsureStock(ctx, "a", 40); err != nil {
		t.Fatal(err)
	}
	var ns []NewOrder
	for i := range 6 {
		ns = append(ns, newOrder("a", fmt.Sprint("r", i), fmt.Sprint("u", i), int64(1+i%3), time.Now().Add(time.Hour)))
	}
	outs := mustCreateOrders(t, e.repo, ns)
	for i, out := range outs {
		if out.Err != nil || !out.Created || out.Order.ID != ns[i].ID || out.Order.ReservationID != ns[i].ReservationID ||
			out.Order.Status != StatusPending {
			t.Errorf("outcome %d = %+v", i, out)
			continue
		}
		// What the batch returns is what it stored.
		if got, err := e.repo.Order(ctx, out.Order.ID); err != nil || got != out.Order {
			t.Errorf("stored order %d = %+v, %v; returned %+v", i, got, err, out.Order)
		}
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 40-(1+2+3+1+2+3) {
		t.Errorf("left = %d, want 28", s.Left)
	}
	// The whole batch again (a redelivery, with fresh order ids): the same orders, no stock taken.
	var again []NewOrder
	for _, n := range ns {
		again = append(again, newOrder(n.Activity, n.ReservationID, n.User, n.Qty, time.Now()))
	}
	for i, out := range mustCreateOrders(t, e.repo, again) {
		if out.Err != nil || out.Created || out.Order != outs[i].Order {
			t.Errorf("redelivered outcome %d = %+v, want %+v", i, out, outs[i].Order)
		}
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 28 {
		t.Errorf("left after the redelivery = %d, want 28", s.Left)
	}
	// Part redelivery, part new (a claim of a dead consumer's entries next to new ones).
	part := mustCreateOrders(t, e.repo, []NewOrder{again[0], newOrder("a", "r6", "u6", 2, time.Now()), again[5]})
	if part[0].Created || part[0].Order != outs[0].Order || !part[1].Created || part[2].Created || part[2].Order != outs[5].Order {
		t.Errorf("part redelivery = %+v", part)
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 26 {
		t.Errorf("left after the part redelivery = %d, want 26", s.Left)
	}
	if outs, err := e.repo.CreateOrders(ctx, nil); err != nil || len(outs) != 0 {
		t.Errorf("empty batch = %+v, %v", outs, err)
	}
}

// Stock runs out in the middle of a batch that also holds redeliveries, a conflicting win and a
// reservation twice: every win gets what creating them one by one in order would give it.
func testCreateOrdersMixed(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 6); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	pre, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r1", "u1", 1, exp)) // left 5
	if err != nil {
		t.Fatal(err)
	}
	ns := []NewOrder{
		newOrder("a", "r2", "u2", 2, exp), // 0: new, left 3
		newOrder("a", "r1", "u1", 1, exp), // 1: redelivery of pre
		newOrder("a", "r1", "u9", 1, exp), // 2: pre's reservation for another buyer: conflict
		newOrder("a", "r3", "u3", 2, exp), // 3: new, left 1
		newOrder("a", "r4", "u4", 2, exp), // 4: refused, 1 left
		newOrder("a", "r5", "u5", 1, exp), // 5: new: the guard is per win, not "stop at the first refusal"; left 0
		newOrder("a", "r2", "u2", 2, exp), // 6: the batch's own first win again
		newOrder("a", "r6", "u6", 1, exp), // 7: refused, sold out
	}
	outs := mustCreateOrders(t, e.repo, ns)
	type want struct {
		created bool
		id      string
		err     error
	}
	wants := []want{
		{true, ns[0].ID, nil}, {false, pre.ID, nil}, {false, pre.ID, ErrConflict}, {true, ns[3].ID, nil},
		{false, "", ErrWinRefused}, {true, ns[5].ID, nil}, {false, ns[0].ID, nil}, {false, "", ErrWinRefused},
	}
	for i, w := range wants {
		out := outs[i]
		if out.Created != w.created || out.Order.ID != w.id || !errors.Is(out.Err, w.err) || (w.err == nil) != (out.Err == nil) {
			t.Errorf("win %d (%s %s): outcome %+v, want created %v, order %q, err %v", i, ns[i].ReservationID, ns[i].User, out, w.created, w.id, w.err)
		}
	}
	if outs[1].Order != pre {
		t.Errorf("redelivery returned %+v, want %+v", outs[1].Order, pre)
	}
	if outs[6].Order != outs[0].Order {
		t.Errorf("repeated reservation returned %+v, want %+v", outs[6].Order, outs[0].Order)
	}
	// Single creates agree with the batch, win by win.
	if _, _, err := e.repo.CreateOrder(ctx, newOrder("a", "r4", "u4", 1, exp)); !errors.Is(err, ErrWinRefused) {
		t.Errorf("single create after the batch: err = %v, want ErrWinRefused", err)
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 0 || s.Total != 6 {
		t.Errorf("stock = %+v, want 6 total, 0 left", s)
	}
	got := map[string]string{}
	for _, o := range e.orders(t, "a") {
		got[o.ReservationID] = o.ID
	}
	wantOrders := map[string]string{"r1": pre.ID, "r2": ns[0].ID, "r3": ns[3].ID, "r5": ns[5].ID}
	if fmt.Sprint(got) != fmt.Sprint(wantOrders) {
		t.Errorf("orders = %v, want %v", got, wantOrders)
	}
}

func testCreateOrdersNoStockRow(t *testing.T, e *env) {
	ctx := context.Background()
	ns := []NewOrder{newOrder("nostock", "r1", "u1", 1, time.Now()), newOrder("nostock", "r2", "u2", 1, time.Now())}
	for i, out := range mustCreateOrders(t, e.repo, ns) {
		if !errors.Is(out.Err, ErrWinRefused) || out.Created || out.Order != (Order{}) {
			t.Errorf("win %d for an activity without stock row: %+v, want ErrWinRefused", i, out)
		}
	}
	if len(e.orders(t, "nostock")) != 0 {
		t.Error("a refused batch wrote orders")
	}
	// A batch spans one activity: a mixed one is refused whole.
	if err := e.repo.EnsureStock(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	mixed := []NewOrder{newOrder("a", "r1", "u1", 1, time.Now()), newOrder("b", "r2", "u2", 1, time.Now())}
	if outs, err := e.repo.CreateOrders(ctx, mixed); !errors.Is(err, admission.ErrBadInput) || outs != nil {
		t.Errorf("mixed batch = %+v, %v; want ErrBadInput", outs, err)
	}
	if len(e.orders(t, "a")) != 0 || mustStock(t, e.repo, "a").Left != 5 {
		t.Error("a mixed batch wrote something")
	}
}

// A statement failing in the middle of the batch (a trigger refusing one buyer's row) rolls the
// whole transaction back: no order and no stock taken for the wins before or after it.
func testCreateOrdersRollsBack(t *testing.T, e *env) {
	ctx := context.Background()
	if err := e.repo.EnsureStock(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	poisonTrigger(t, e)
	exp := time.Now().Add(time.Hour)
	ns := []NewOrder{newOrder("a", "r1", "u1", 1, exp), newOrder("a", "r2", "poison", 1, exp), newOrder("a", "r3", "u3", 1, exp)}
	outs, err := e.repo.CreateOrders(ctx, ns)
	if err == nil || !strings.Contains(err.Error(), "poisoned order") || errors.Is(err, ErrUnavailable) || outs != nil {
		t.Fatalf("poisoned batch = %+v, %v; want the trigger's error, not transient", outs, err)
	}
	if os := e.orders(t, "a"); len(os) != 0 {
		t.Errorf("a failed batch committed %+v", os)
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 5 {
		t.Errorf("left = %d after a failed batch, want 5", s.Left)
	}
	// Without the poison, the same batch goes through.
	outs = mustCreateOrders(t, e.repo, []NewOrder{ns[0], ns[2]})
	if !outs[0].Created || !outs[1].Created || mustStock(t, e.repo, "a").Left != 3 {
		t.Errorf("batch without the poison = %+v", outs)
	}
}

// Consumers in two processes create overlapping batches at once (a claim after a slow consumer):
// no reservation gets two orders, no stock is lost, no transaction fails.
func testCreateOrdersConcurrent(t *testing.T, e *env) {
	ctx := context.Background()
	const (
		wins  = 200
		stock = 150
		batch = 16
	)
	if err := e.repo.EnsureStock(ctx, "a", stock); err != nil {
		t.Fatal(err)
	}
	repos := []Repository{e.repo, e.openRepo(t)}
	var (
		wg       sync.WaitGroup
		created  atomic.Int64
		mu       sync.Mutex
		refused  = map[string]bool{}
		returned = map[string]string{} // reservation → order id of every outcome
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := repos[g%2]
			for lo := 0; lo < wins; lo += batch {
				var ns []NewOrder
				for k := lo; k < lo+batch && k < wins; k++ {
					i := (k + g*wins/4) % wins // each goroutine starts elsewhere and wraps around
					ns = append(ns, newOrder("a", fmt.Sprintf("r%03d", i), fmt.Sprintf("u%03d", i), 1, time.Now().Add(time.Hour)))
				}
				outs, err := r.CreateOrders(ctx, ns)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				mu.Lock()
				for i, out := range outs {
					resv := ns[i].ReservationID
					switch {
					case errors.Is(out.Err, ErrWinRefused):
						refused[resv] = true
					case out.Err != nil:
						t.Errorf("%s: %v", resv, out.Err)
					default:
						if out.Created {
							created.Add(1)
						}
						if id, ok := returned[resv]; ok && id != out.Order.ID {
							t.Errorf("%s: orders %s and %s", resv, id, out.Order.ID)
						}
						returned[resv] = out.Order.ID
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	orders := e.orders(t, "a")
	if len(orders) != stock || created.Load() != stock {
		t.Errorf("%d orders, %d creations; want %d of each", len(orders), created.Load(), stock)
	}
	for _, o := range orders {
		if returned[o.ReservationID] != o.ID {
			t.Errorf("order %+v was never returned", o)
		}
		if refused[o.ReservationID] {
			t.Errorf("%s was refused but has an order (refused means sold out, which lasts)", o.ReservationID)
		}
	}
	if s := mustStock(t, e.repo, "a"); s.Left != 0 {
		t.Errorf("left = %d, want 0", s.Left)
	}
}

// ackCounter is the env's real store, counting the Ack calls the consumer makes.
type ackCounter struct {
	admission.Store
	calls, ids atomic.Int64
}

func (s *ackCounter) Ack(ctx context.Context, activity, group string, ids ...string) error {
	s.calls.Add(1)
	s.ids.Add(int64(len(ids)))
	return s.Store.Ack(ctx, activity, group, ids...)
}

// startConsumerOn runs a consumer on another view of the env's store.
func (e *env) startConsumerOn(t *testing.T, store admission.Store, act string, opts ConsumerOptions) (stop func()) {
	t.Helper()
	c, err := NewConsumer(store, e.repo, act, opts)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, c.Run)
}

// Wins queued before the consumer starts are read together and become orders in one
// transaction, with one Ack.
func testConsumerOneBatch(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 30, 1, time.Minute)
	us := users("u", 20)
	for _, u := range us {
		e.admit(t, "sale", u, 1)
	}
	m := new(Metrics)
	store := &ackCounter{Store: e.store}
	e.startConsumerOn(t, store, "sale", e.consumerOpts("c1", m))
	eventually(t, "20 orders acknowledged", func() bool { return store.ids.Load() == 20 })
	if s := m.Snapshot(); s.OrdersCreated != 20 || s.Batches != 1 || s.Redelivered != 0 || s.DeadLettered != 0 {
		t.Errorf("metrics = %+v, want 20 orders in 1 batch", s)
	}
	if n := store.calls.Load(); n != 1 {
		t.Errorf("%d Ack calls for one batch", n)
	}
	for _, u := range us {
		if r := e.result(t, "sale", u); r.Code != resultPending || r.OrderID == "" {
			t.Errorf("result of %s = %+v", u, r)
		}
	}
	if p, _ := e.store.ReadGroup(ctx, "sale", DefaultGroup, "c1", 100, 0, true); len(p) != 0 {
		t.Errorf("still pending: %+v", p)
	}
	e.requireReconciled(t, "sale")
}

// The database has fewer items than the store (sold elsewhere): the batch's first wins, in queue
// order, become orders; the rest are refused, dead-lettered and not released.
func testConsumerBatchRunsOut(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 10, 1, time.Minute)
	if err := e.repo.EnsureStock(ctx, "sale", 10); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `UPDATE stock SET "left" = 7`, `UPDATE stock SET "left" = 7`)
	us := users("u", 10)
	for _, u := range us {
		e.admit(t, "sale", u, 1)
	}
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	eventually(t, "3 refused", func() bool { return m.Refused.Load() == 3 })
	eventually(t, "7 orders", func() bool { return m.OrdersCreated.Load() == 7 })
	if e.buckets > 1 {
		// A split activity's queue is in admission order within each bucket only: which 7
		// wins come first is not the buyers' order.
		eventually(t, "7 pending and 3 failed", func() bool {
			codes := map[string]int{}
			for _, u := range us {
				codes[e.result(t, "sale", u).Code]++
			}
			return codes[resultPending] == 7 && codes[resultFailed] == 3
		})
	} else {
		for i, u := range us {
			want := resultPending
			if i >= 7 {
				want = resultFailed
			}
			eventually(t, "result of "+u, func() bool { return e.result(t, "sale", u).Code == want })
		}
	}
	// One batch, and one more for the refused wins after catching up with the definition.
	if s := m.Snapshot(); s.Batches != 2 || s.DeadLettered != 3 || s.Released != 0 {
		t.Errorf("metrics = %+v", s)
	}
	dead, err := e.store.DeadLetters(ctx, "sale", 10)
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	for i, d := range dead {
		failed := e.result(t, "sale", d.User).Code == resultFailed
		if (e.buckets <= 1 && d.User != us[7+i]) || !failed || !strings.HasPrefix(d.Reason, reasonRefused) {
			t.Errorf("dead letter %d = %+v, want %s refused", i, d, us[7+i])
		}
	}
	if s := mustStock(t, e.repo, "sale"); s.Left != 0 {
		t.Errorf("left = %d", s.Left)
	}
}

// A poison win read in one batch with others: the batch fails, its wins are handled one by one,
// the others become orders at once, and only the poison is dead-lettered after MaxDeliveries.
func testConsumerBatchPoison(t *testing.T, e *env) {
	ctx := context.Background()
	e.openActivity(t, "sale", 10, 1, time.Minute)
	poisonTrigger(t, e)
	us := []string{"u1", "u2", "poison", "u3", "u4"}
	for _, u := range us {
		e.admit(t, "sale", u, 1)
	}
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	eventually(t, "a dead letter", func() bool { return m.DeadLettered.Load() == 1 })
	dead, err := e.store.DeadLetters(ctx, "sale", 10)
	if err != nil || len(dead) != 1 || dead[0].User != "poison" || dead[0].Deliveries != 3 ||
		!strings.HasPrefix(dead[0].Reason, reasonPoison) {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	orders := e.orders(t, "sale")
	if len(orders) != 4 {
		t.Fatalf("%d orders, want 4", len(orders))
	}
	for _, u := range []string{"u1", "u2", "u3", "u4"} {
		eventually(t, "result of "+u, func() bool { return e.result(t, "sale", u).Code == resultPending })
	}
	eventually(t, "poison result", func() bool { return e.result(t, "sale", "poison").Code == resultFailed })
	// No batch ever committed: the poison was in each one, so every order came from the per-win path.
	if s := m.Snapshot(); s.OrdersCreated != 4 || s.Batches != 0 || s.Released != 1 {
		t.Errorf("metrics = %+v", s)
	}
	e.requireReconciled(t, "sale")
}

// While wins keep coming, a read that found fewer than Batch waits Linger and takes what arrived
// meanwhile into the same batch; a win after a quiet spell (a read that found nothing) goes at
// once, however long Linger is.
func testConsumerLinger(t *testing.T, e *env) {
	e.openActivity(t, "sale", 30, 1, time.Minute)
	m := new(Metrics)
	opts := e.consumerOpts("c1", m)
	// Long enough that a loaded machine cannot make a read that does not linger look like one
	// that did (2 s was once exceeded at a load of 12).
	opts.Linger = 5 * time.Second
	opts.ClaimIdle, opts.ClaimEvery = time.Hour, time.Hour // no claim round between the reads
	e.startConsumer(t, "sale", opts)
	us := users("u", 6)

	// The first read after start finds the queue quiet: no linger.
	start := time.Now()
	e.admit(t, "sale", us[0], 1)
	eventually(t, "first order", func() bool { return m.OrdersCreated.Load() == 1 })
	if d := time.Since(start); d >= opts.Linger {
		t.Errorf("a win on a quiet queue took %v: it lingered", d)
	}
	// Busy now: the next read finds one win at once, lingers, and takes the four that follow.
	start = time.Now()
	for _, u := range us[1:5] {
		e.admit(t, "sale", u, 1)
	}
	eventually(t, "five orders", func() bool { return m.OrdersCreated.Load() == 5 })
	if s := m.Snapshot(); s.Batches != 2 || s.BatchWins != 5 {
		t.Errorf("metrics = %+v, want the four wins in one batch", s)
	}
	if d := time.Since(start); d < opts.Linger {
		t.Errorf("the second batch came after %v, before the linger ended", d)
	}
	// Quiet again (a read of Block found nothing): the next win goes at once.
	time.Sleep(2 * opts.Block)
	start = time.Now()
	e.admit(t, "sale", us[5], 1)
	eventually(t, "sixth order", func() bool { return m.OrdersCreated.Load() == 6 })
	if d := time.Since(start); d >= opts.Linger {
		t.Errorf("a win after a quiet spell took %v: it lingered", d)
	}
	e.requireReconciled(t, "sale")
}

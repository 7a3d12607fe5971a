package orderbackend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tests of SQLite's group commit (sqlite_group.go), and of concurrent CreateOrders calls on many
// activities on both databases (testCreateOrdersManyActivities, one of batchScenarios).

// orderModel is the oracle of CreateOrders: one by one in order, in memory, as the README's "The
// guarantees" defines a win's transaction.
type orderModel struct {
	left   map[string]int64               // activity → left; no entry: no stock row
	orders map[string]map[string]NewOrder // activity → reservation → its order
}

func newOrderModel() *orderModel {
	return &orderModel{left: map[string]int64{}, orders: map[string]map[string]NewOrder{}}
}

// modelOutcome is what the model expects of one win.
type modelOutcome struct {
	created bool
	order   NewOrder // zero when refused
	err     error    // nil, ErrWinRefused or ErrConflict
}

func (m *orderModel) create(ns []NewOrder) []modelOutcome {
	outs := make([]modelOutcome, len(ns))
	for i, n := range ns {
		n = n.normalized()
		byResv := m.orders[n.Activity]
		if byResv == nil {
			byResv = map[string]NewOrder{}
			m.orders[n.Activity] = byResv
		}
		if o, ok := byResv[n.ReservationID]; ok {
			outs[i] = modelOutcome{order: o}
			if o.User != n.User || o.Qty != n.Qty {
				outs[i].err = ErrConflict
			}
			continue
		}
		left, ok := m.left[n.Activity]
		if !ok || left < n.Qty {
			outs[i].err = ErrWinRefused
			continue
		}
		m.left[n.Activity] = left - n.Qty
		byResv[n.ReservationID] = n
		outs[i] = modelOutcome{created: true, order: n}
	}
	return outs
}

// checkModel compares a call's outcomes with the model's.
func checkModel(t *testing.T, what string, ns []NewOrder, got []CreateOutcome, want []modelOutcome) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d outcomes for %d wins", what, len(got), len(want))
		return
	}
	for i, w := range want {
		g := got[i]
		bad := g.Created != w.created || !errors.Is(g.Err, w.err) || (g.Err == nil) != (w.err == nil)
		if !errors.Is(w.err, ErrWinRefused) {
			o := g.Order
			bad = bad || o.ID != w.order.ID || o.ReservationID != w.order.ReservationID || o.User != w.order.User ||
				o.Qty != w.order.Qty || o.Activity != w.order.Activity || !o.CreatedAt.Equal(w.order.CreatedAt) ||
				!o.ExpiresAt.Equal(w.order.ExpiresAt)
		} else {
			bad = bad || g.Order != (Order{})
		}
		if bad {
			t.Errorf("%s: win %d (%s %s qty %d) = created %v, order %+v, err %v; want created %v, order %s, err %v",
				what, i, ns[i].ReservationID, ns[i].User, ns[i].Qty, g.Created, g.Order, g.Err, w.created, w.order.ID, w.err)
		}
	}
}

// mixedBatches makes a deterministic sequence of batches for one activity that holds every kind
// of win: new, redelivered (the same user and quantity, with a fresh order id, as a redelivery
// has), another buyer's reservation (a conflict), a reservation twice in one batch, and, once the
// stock runs out, refused.
func mixedBatches(act string, seed uint64, batches int) [][]NewOrder {
	rng := rand.New(rand.NewPCG(seed, 7))
	exp := time.Now().Add(time.Hour)
	var (
		out  [][]NewOrder
		seen []NewOrder
		next int
	)
	for range batches {
		var ns []NewOrder
		for range 1 + rng.IntN(6) {
			switch k := rng.IntN(10); {
			case k < 6 || len(seen) == 0: // new
				n := newOrder(act, fmt.Sprintf("%s-r%03d", act, next), fmt.Sprintf("u%03d", next), int64(1+rng.IntN(3)), exp)
				next++
				seen = append(seen, n)
				ns = append(ns, n)
			case k < 8: // redelivered
				p := seen[rng.IntN(len(seen))]
				ns = append(ns, newOrder(act, p.ReservationID, p.User, p.Qty, exp))
			case k < 9: // another buyer's reservation
				p := seen[rng.IntN(len(seen))]
				ns = append(ns, newOrder(act, p.ReservationID, "thief", p.Qty, exp))
			default: // the batch's own win twice
				if len(ns) > 0 {
					p := ns[rng.IntN(len(ns))]
					ns = append(ns, newOrder(act, p.ReservationID, p.User, p.Qty, exp))
				}
			}
		}
		out = append(out, ns)
	}
	return out
}

// Many goroutines, each on its own activity, create mixed batches at once: every win gets exactly
// the outcome of its batches run one by one (activities do not interact), the stock never goes
// below zero, and the database holds exactly the model's orders. On SQLite the calls share
// transactions (group commit); on PostgreSQL they run side by side.
func testCreateOrdersManyActivities(t *testing.T, e *env) {
	ctx := context.Background()
	const (
		goroutines = 12
		batches    = 40
		stock      = 60
	)
	model := newOrderModel()
	plans := make([][][]NewOrder, goroutines)
	wants := make([][][]modelOutcome, goroutines)
	for g := range goroutines {
		act := fmt.Sprintf("act%02d", g)
		if g != goroutines-1 { // the last activity has no stock row: all its wins are refused
			if err := e.repo.EnsureStock(ctx, act, stock); err != nil {
				t.Fatal(err)
			}
			model.left[act] = stock
		}
		plans[g] = mixedBatches(act, uint64(g), batches)
		for _, ns := range plans[g] {
			wants[g] = append(wants[g], model.create(ns))
		}
	}
	var before TxStats
	if r, ok := e.repo.(TxStatsReporter); ok {
		before = r.TxStats()
	}
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for b, ns := range plans[g] {
				outs, err := e.repo.CreateOrders(ctx, ns)
				if err != nil {
					t.Errorf("goroutine %d batch %d: %v", g, b, err)
					return
				}
				checkModel(t, fmt.Sprintf("goroutine %d batch %d", g, b), ns, outs, wants[g][b])
			}
		})
	}
	wg.Wait()
	calls, wins := 0, 0
	for g := range goroutines {
		act := fmt.Sprintf("act%02d", g)
		for _, ns := range plans[g] {
			if len(ns) > 0 { // an empty call answers at once, with no transaction
				calls++
				wins += len(ns)
			}
		}
		got := map[string]string{}
		for _, o := range e.orders(t, act) {
			got[o.ReservationID] = o.ID + "/" + o.User
		}
		want := map[string]string{}
		for resv, n := range model.orders[act] {
			want[resv] = n.ID + "/" + n.User
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: orders %v, want %v", act, got, want)
		}
		if left, ok := model.left[act]; ok {
			if s := mustStock(t, e.repo, act); s.Left != left || s.Left < 0 {
				t.Errorf("%s: left %d, want %d", act, s.Left, left)
			}
		}
	}
	if r, ok := e.repo.(TxStatsReporter); ok {
		st := r.TxStats()
		st.Transactions -= before.Transactions
		st.Calls -= before.Calls
		st.Wins -= before.Wins
		if st.Calls != int64(calls) || st.Wins != int64(wins) || st.Transactions < 1 || st.Transactions > st.Calls {
			t.Errorf("tx stats %+v for %d calls of %d wins", st, calls, wins)
		}
		t.Logf("%d calls of %d wins in %d transactions", st.Calls, st.Wins, st.Transactions)
	}
}

// openTestSQLite opens a fresh SQLite repository.
func openTestSQLite(t *testing.T) *SQLite {
	t.Helper()
	s, err := NewSQLite(context.Background(), filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// openLockedSQLite opens a fresh SQLite repository with activity "a" stocked with 10 items, then
// takes the file's write lock from another connection (another
// process, as a reconcile run would be): the repository's write transactions wait for it until
// the caller rolls conn back.
func openLockedSQLite(t *testing.T) (*SQLite, *sql.Conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "orders.db")
	s, err := NewSQLite(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if err := s.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	other, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return s, conn
}

// holdWriter takes the writer's turn as a running transaction would, so that CreateOrders calls
// wait in line; release hands the line on as one group (what the end of a transaction does).
func holdWriter(t *testing.T, s *SQLite) (release func()) {
	t.Helper()
	s.line.mu.Lock()
	defer s.line.mu.Unlock()
	if s.line.busy {
		t.Fatal("the writer is busy")
	}
	s.line.busy = true
	return s.handOff
}

// waitInLine waits until n calls wait in line.
func waitInLine(t *testing.T, s *SQLite, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d calls in line", n), func() bool {
		s.line.mu.Lock()
		defer s.line.mu.Unlock()
		return len(s.line.calls) == n
	})
}

// callResult is one CreateOrders call's answer.
type callResult struct {
	outs []CreateOutcome
	err  error
}

// queueCalls starts one CreateOrders call per batch while the writer is held, each only after the
// previous one is in line, so the line's order is the slice's; the channels give the answers.
func queueCalls(t *testing.T, s *SQLite, ctxs []context.Context, batches [][]NewOrder) []chan callResult {
	t.Helper()
	s.line.mu.Lock()
	inLine := len(s.line.calls)
	s.line.mu.Unlock()
	res := make([]chan callResult, len(batches))
	for i, ns := range batches {
		res[i] = make(chan callResult, 1)
		ctx := context.Background()
		if ctxs != nil {
			ctx = ctxs[i]
		}
		go func() {
			outs, err := s.CreateOrders(ctx, ns)
			res[i] <- callResult{outs, err}
		}()
		waitInLine(t, s, inLine+i+1)
	}
	return res
}

// seedBoth gives two databases the same stock rows and existing orders.
func seedBoth(t *testing.T, a, b *SQLite, stock map[string]int64, pre []NewOrder) {
	t.Helper()
	ctx := context.Background()
	for _, r := range []*SQLite{a, b} {
		for act, n := range stock {
			if err := r.EnsureStock(ctx, act, n); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range pre {
			if _, created, err := r.CreateOrder(ctx, n); err != nil || !created {
				t.Fatalf("seed %+v: created %v, %v", n, created, err)
			}
		}
	}
}

// sameAsAlone requires the group's answers, and the database they leave, to be exactly those of
// the same calls run alone one after another on the reference database.
func sameAsAlone(t *testing.T, s, ref *SQLite, acts []string, batches [][]NewOrder, got []callResult) {
	t.Helper()
	ctx := context.Background()
	for i, ns := range batches {
		wantOuts, wantErr := ref.CreateOrders(ctx, ns)
		g := got[i]
		if fmt.Sprint(g.err) != fmt.Sprint(wantErr) || len(g.outs) != len(wantOuts) {
			t.Errorf("call %d: %d outcomes, err %v; alone: %d, %v", i, len(g.outs), g.err, len(wantOuts), wantErr)
			continue
		}
		for j := range wantOuts {
			if g.outs[j].Created != wantOuts[j].Created || g.outs[j].Order != wantOuts[j].Order ||
				fmt.Sprint(g.outs[j].Err) != fmt.Sprint(wantOuts[j].Err) {
				t.Errorf("call %d win %d: %+v; alone: %+v", i, j, g.outs[j], wantOuts[j])
			}
		}
	}
	for _, act := range acts {
		gs, gerr := s.Stock(ctx, act)
		ws, werr := ref.Stock(ctx, act)
		if gs != ws || fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("%s: stock %+v, %v; alone %+v, %v", act, gs, gerr, ws, werr)
		}
		gos, err := s.Orders(ctx, act)
		if err != nil {
			t.Fatal(err)
		}
		wos, err := ref.Orders(ctx, act)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(gos) != fmt.Sprint(wos) {
			t.Errorf("%s: orders %+v; alone %+v", act, gos, wos)
		}
	}
}

func collect(res []chan callResult) []callResult {
	out := make([]callResult, len(res))
	for i, ch := range res {
		out[i] = <-ch
	}
	return out
}

// A line of calls on several activities, all new and within the stock (the sale's case), shares
// one transaction on the fast path; a line of mixed calls (redeliveries, conflicts, a reservation
// in two calls, an activity running out, one without stock row) one transaction on the careful
// path. Either gives exactly the answers and the database of the calls run alone in line order.
func TestSQLiteGroupSameAsAlone(t *testing.T) {
	exp := time.Now().Add(time.Hour)
	t.Run("fast", func(t *testing.T) {
		s, ref := openTestSQLite(t), openTestSQLite(t)
		ref.line.off = true
		acts := []string{"a", "b", "c"}
		seedBoth(t, s, ref, map[string]int64{"a": 100, "b": 100, "c": 100}, nil)
		var batches [][]NewOrder
		for i := range 9 {
			act := acts[i%3]
			var ns []NewOrder
			for k := range 1 + i%4 {
				ns = append(ns, newOrder(act, fmt.Sprintf("r%d-%d", i, k), fmt.Sprintf("u%d-%d", i, k), int64(1+k%2), exp))
			}
			batches = append(batches, ns)
		}
		release := holdWriter(t, s)
		res := queueCalls(t, s, nil, batches)
		before := s.TxStats()
		release()
		got := collect(res)
		if st := s.TxStats(); st.Transactions-before.Transactions != 1 || st.Calls-before.Calls != 9 {
			t.Errorf("tx stats %+v after %+v: want one transaction for the 9 calls", st, before)
		}
		for i, g := range got {
			for j, o := range g.outs {
				if !o.Created || o.Err != nil {
					t.Errorf("call %d win %d = %+v", i, j, o)
				}
			}
		}
		sameAsAlone(t, s, ref, acts, batches, got)
	})
	t.Run("careful", func(t *testing.T) {
		s, ref := openTestSQLite(t), openTestSQLite(t)
		ref.line.off = true
		acts := []string{"a", "b", "c", "nostock"}
		pre := []NewOrder{newOrder("a", "a-r0", "u0", 1, exp), newOrder("b", "b-r0", "u0", 2, exp)}
		// Little stock: a and b run out within the line, after earlier calls took some.
		seedBoth(t, s, ref, map[string]int64{"a": 6, "b": 4, "c": 40}, pre)
		n := func(act, resv, user string, qty int64) NewOrder { return newOrder(act, resv, user, qty, exp) }
		batches := [][]NewOrder{
			{n("a", "a-r1", "u1", 2), n("a", "a-r0", "u0", 1), n("a", "a-r2", "u2", 1)}, // new, existing, new: a 5 → 2
			{n("b", "b-r1", "u1", 1), n("b", "b-r0", "u9", 2)},                          // new, conflict: b 2 → 1
			{n("a", "a-r3", "u3", 2), n("a", "a-r1", "u1", 2), n("a", "a-r4", "u4", 1)}, // new, call 0's, refused: a 0
			{n("c", "c-r1", "u1", 3), n("c", "c-r1", "u1", 3)},                          // new, the same again
			{n("nostock", "n-r1", "u1", 1)},                                             // refused: no stock row
			{n("b", "b-r2", "u2", 2), n("b", "b-r3", "u3", 1)},                          // refused (1 left), new: b 0
			{n("a", "a-r5", "u5", 1), n("a", "a-r2", "u2", 1)},                          // refused, existing
			{n("c", "c-r2", "u2", 1), n("c", "c-r1", "thief", 3)},                       // new, conflict
		}
		release := holdWriter(t, s)
		res := queueCalls(t, s, nil, batches)
		before := s.TxStats()
		release()
		got := collect(res)
		if st := s.TxStats(); st.Transactions-before.Transactions != 1 || st.Calls-before.Calls != int64(len(batches)) {
			t.Errorf("tx stats %+v after %+v: want one transaction for the %d calls", st, before, len(batches))
		}
		var refused, existing, conflicts int
		for i, g := range got {
			for _, o := range g.outs {
				switch {
				case errors.Is(o.Err, ErrWinRefused) && batches[i][0].Activity != "nostock":
					refused++
				case errors.Is(o.Err, ErrConflict):
					conflicts++
				case o.Err == nil && !o.Created:
					existing++
				}
			}
		}
		if refused == 0 || existing == 0 || conflicts == 0 {
			t.Errorf("the line should hold wins refused for want of stock (%d), existing (%d) and conflicting (%d)",
				refused, existing, conflicts)
		}
		sameAsAlone(t, s, ref, acts, batches, got)
	})
}

// A line longer than maxGroupWins goes in several transactions, in line order.
func TestSQLiteGroupBounded(t *testing.T) {
	s := openTestSQLite(t)
	ctx := context.Background()
	if err := s.EnsureStock(ctx, "a", 10_000); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	var batches [][]NewOrder
	for i := range 12 {
		var ns []NewOrder
		for k := range 100 {
			ns = append(ns, newOrder("a", fmt.Sprintf("r%02d-%03d", i, k), fmt.Sprintf("u%02d-%03d", i, k), 1, exp))
		}
		batches = append(batches, ns)
	}
	release := holdWriter(t, s)
	res := queueCalls(t, s, nil, batches)
	before := s.TxStats()
	release()
	for i, r := range collect(res) {
		if r.err != nil || len(r.outs) != 100 || !r.outs[99].Created {
			t.Fatalf("call %d: %v", i, r.err)
		}
	}
	// 5 calls of 100 wins fit in 512: 5 + 5 + 2.
	if st := s.TxStats(); st.Transactions-before.Transactions != 3 || st.Wins-before.Wins != 1200 {
		t.Errorf("tx stats %+v after %+v: want 1200 wins in 3 transactions", st, before)
	}
	if st := mustStock(t, s, "a"); st.Left != 10_000-1200 {
		t.Errorf("left = %d", st.Left)
	}
}

// A call whose batch makes the shared transaction fail as a whole (a row the schema refuses:
// qty 0 breaks CHECK (qty > 0); an order id another order has breaks the primary key) fails
// alone, with exactly the error it gets alone; the other calls of its line commit.
func TestSQLiteGroupPoison(t *testing.T) {
	ctx := context.Background()
	exp := time.Now().Add(time.Hour)
	s, ref := openTestSQLite(t), openTestSQLite(t)
	ref.line.off = true
	taken := newOrder("a", "a-taken", "u0", 1, exp)
	seedBoth(t, s, ref, map[string]int64{"a": 20, "b": 20, "c": 20}, []NewOrder{taken})
	dupID := newOrder("c", "c-dup", "u9", 1, exp)
	dupID.ID = taken.ID
	batches := [][]NewOrder{
		{newOrder("a", "a-1", "u1", 1, exp), newOrder("a", "a-2", "u2", 2, exp)},
		{newOrder("b", "b-1", "u1", 1, exp), newOrder("b", "b-zero", "u3", 0, exp), newOrder("b", "b-2", "u2", 1, exp)},
		{newOrder("c", "c-1", "u1", 1, exp)},
		{newOrder("c", "c-2", "u2", 1, exp), dupID},
		{newOrder("a", "a-3", "u3", 1, exp)},
	}
	release := holdWriter(t, s)
	res := queueCalls(t, s, nil, batches)
	release()
	got := collect(res)
	for _, i := range []int{1, 3} {
		if got[i].err == nil || errors.Is(got[i].err, ErrUnavailable) || got[i].outs != nil {
			t.Errorf("poisoned call %d = %+v, %v; want its own constraint error", i, got[i].outs, got[i].err)
		}
	}
	for _, i := range []int{0, 2, 4} {
		if got[i].err != nil {
			t.Errorf("call %d failed with another call's poison: %v", i, got[i].err)
		}
	}
	sameAsAlone(t, s, ref, []string{"a", "b", "c"}, batches, got)
	if _, err := s.OrderByReservation(ctx, "b", "b-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the poisoned call's other wins were written: %v", err)
	}
}

// A caller whose ctx ends while it waits in line leaves it with its ctx's error, and nothing is
// written for it; the others of the line commit.
func TestSQLiteGroupWithdrawn(t *testing.T) {
	s := openTestSQLite(t)
	ctx := context.Background()
	if err := s.EnsureStock(ctx, "a", 10); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	gone, cancel := context.WithCancel(ctx)
	batches := [][]NewOrder{
		{newOrder("a", "r1", "u1", 1, exp)},
		{newOrder("a", "r2", "u2", 3, exp), newOrder("a", "r3", "u3", 1, exp)},
		{newOrder("a", "r4", "u4", 1, exp)},
	}
	release := holdWriter(t, s)
	res := queueCalls(t, s, []context.Context{ctx, gone, ctx}, batches)
	cancel()
	r := <-res[1]
	if !errors.Is(r.err, context.Canceled) || r.outs != nil {
		t.Fatalf("withdrawn call = %+v, %v; want context.Canceled", r.outs, r.err)
	}
	waitInLine(t, s, 2)
	release()
	for _, i := range []int{0, 2} {
		if r := <-res[i]; r.err != nil || !r.outs[0].Created {
			t.Errorf("call %d = %+v, %v", i, r.outs, r.err)
		}
	}
	for _, resv := range []string{"r2", "r3"} {
		if _, err := s.OrderByReservation(ctx, "a", resv); !errors.Is(err, ErrNotFound) {
			t.Errorf("withdrawn %s has an order: %v", resv, err)
		}
	}
	if st := mustStock(t, s, "a"); st.Left != 8 {
		t.Errorf("left = %d, want 8", st.Left)
	}
}

// Once a call is taken into a transaction it runs: its caller giving up does not roll it back,
// nor the others', and the caller gets its real answer. Another process holds the database's
// write lock meanwhile, so the shared transaction is certainly under way when the ctx ends.
func TestSQLiteGroupSentRuns(t *testing.T) {
	s, conn := openLockedSQLite(t)
	ctx := context.Background()

	exp := time.Now().Add(time.Hour)
	gone, cancel := context.WithCancel(ctx)
	release := holdWriter(t, s)
	res := queueCalls(t, s, []context.Context{ctx, gone}, [][]NewOrder{
		{newOrder("a", "r1", "u1", 1, exp)}, {newOrder("a", "r2", "u2", 1, exp)},
	})
	release() // both calls are taken into one transaction, which waits for the lock
	cancel()
	time.Sleep(50 * time.Millisecond) // give a wrongly withdrawn call the time to return
	select {
	case r := <-res[1]:
		t.Fatalf("a call taken into a transaction returned before it ran: %+v, %v", r.outs, r.err)
	default:
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for i, r := range collect(res) {
		if r.err != nil || !r.outs[0].Created {
			t.Errorf("call %d = %+v, %v", i, r.outs, r.err)
		}
	}
	if st := mustStock(t, s, "a"); st.Left != 8 {
		t.Errorf("left = %d, want 8", st.Left)
	}
}

// A shared transaction the database refuses as a whole for a reason of its own (another process
// holds the write lock beyond the busy timeout) answers every call with ErrUnavailable, under
// the call's own error context, and writes nothing; the calls succeed once the lock is gone.
func TestSQLiteGroupBusy(t *testing.T) {
	s, conn := openLockedSQLite(t)
	ctx := context.Background()
	// The writer is one connection, kept open: the pragma shortens its wait for the test.
	if _, err := s.w.ExecContext(ctx, "PRAGMA busy_timeout = 100"); err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour)
	batches := [][]NewOrder{{newOrder("a", "r1", "u1", 1, exp)}, {newOrder("a", "r2", "u2", 1, exp), newOrder("a", "r3", "u3", 1, exp)}}
	release := holdWriter(t, s)
	res := queueCalls(t, s, nil, batches)
	release()
	for i, r := range collect(res) {
		want := "sqlite: create order for reservation r1: "
		if i == 1 {
			want = "sqlite: create 2 orders for reservation r2: "
		}
		if !errors.Is(r.err, ErrUnavailable) || r.outs != nil || !strings.HasPrefix(fmt.Sprint(r.err), want) {
			t.Errorf("call %d = %+v, %v; want ErrUnavailable from %q", i, r.outs, r.err, want)
		}
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if st := mustStock(t, s, "a"); st.Left != 10 {
		t.Errorf("left = %d after a refused transaction", st.Left)
	}
	for _, ns := range batches {
		if outs, err := s.CreateOrders(ctx, ns); err != nil || !outs[0].Created {
			t.Errorf("after the lock: %+v, %v", outs, err)
		}
	}
}

// The other writes (Pay, Cancel, CancelExpired, EnsureStock) take the writer between the line's
// transactions: run next to many goroutines creating orders, every one keeps its semantics and
// the stock adds up (total = left + Σ qty of pending and paid orders).
func TestSQLiteGroupOtherWrites(t *testing.T) {
	s := openTestSQLite(t)
	ctx := context.Background()
	const (
		acts    = 6
		creates = 40
	)
	for a := range acts {
		if err := s.EnsureStock(ctx, fmt.Sprintf("a%d", a), 50); err != nil {
			t.Fatal(err)
		}
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created []Order
	)
	for a := range acts {
		act := fmt.Sprintf("a%d", a)
		wg.Go(func() {
			for i := range creates {
				// Every third order's window is already closed: the sweeper's.
				exp := time.Now().Add(time.Hour)
				if i%3 == 0 {
					exp = time.Now().Add(-time.Second)
				}
				ns := []NewOrder{newOrder(act, fmt.Sprintf("r%d", i), fmt.Sprintf("u%d", i), 1+int64(i%2), exp)}
				outs, err := s.CreateOrders(ctx, ns)
				if err != nil {
					t.Errorf("%s: %v", act, err)
					return
				}
				if outs[0].Created {
					mu.Lock()
					created = append(created, outs[0].Order)
					mu.Unlock()
				}
			}
		})
	}
	var (
		paid, cancelled sync.Map // order id → struct{}
		done            = make(chan struct{})
		others          sync.WaitGroup
	)
	others.Go(func() { // pays and cancels what it finds
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			default:
			}
			mu.Lock()
			var o Order
			if len(created) > 0 {
				o = created[k%len(created)]
			}
			mu.Unlock()
			if o.ID == "" {
				time.Sleep(time.Millisecond)
				continue
			}
			if k%2 == 0 {
				got, err := payNow(ctx, s, o.ID, time.Now())
				switch {
				case err == nil:
					paid.Store(o.ID, struct{}{})
				case errors.Is(err, ErrNotPending) || errors.Is(err, ErrExpired):
				default:
					t.Errorf("pay %s: %+v, %v", o.ID, got, err)
				}
			} else {
				_, err := s.Cancel(ctx, o.ID, time.Now())
				switch {
				case err == nil:
					cancelled.Store(o.ID, struct{}{})
				case errors.Is(err, ErrNotPending):
				default:
					t.Errorf("cancel %s: %v", o.ID, err)
				}
			}
		}
	})
	others.Go(func() { // sweeps, and raises the totals
		for k := 0; ; k++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := s.CancelExpired(ctx, time.Now(), 5); err != nil {
				t.Errorf("cancel expired: %v", err)
			}
			// Totals only grow: a lower total than what is sold is refused by the schema.
			if err := s.EnsureStock(ctx, fmt.Sprintf("a%d", k%acts), 50+int64(k/acts)); err != nil {
				t.Errorf("ensure stock: %v", err)
			}
		}
	})
	wg.Wait()
	close(done)
	others.Wait()
	if _, err := s.CancelExpired(ctx, time.Now(), 10_000); err != nil {
		t.Fatal(err)
	}
	for a := range acts {
		act := fmt.Sprintf("a%d", a)
		st := mustStock(t, s, act)
		var held int64
		for _, o := range ordersOf(t, s, act) {
			if o.Status != StatusCancelled {
				held += o.Qty
			}
			if _, ok := paid.Load(o.ID); ok && o.Status != StatusPaid {
				t.Errorf("paid order %s is %s", o.ID, o.Status)
			}
			if _, ok := cancelled.Load(o.ID); ok && o.Status != StatusCancelled {
				t.Errorf("cancelled order %s is %s", o.ID, o.Status)
			}
		}
		if st.Left < 0 || st.Total != st.Left+held {
			t.Errorf("%s: stock %+v, %d held in orders", act, st, held)
		}
	}
}

func ordersOf(t *testing.T, r Repository, act string) []Order {
	t.Helper()
	os, err := r.Orders(context.Background(), act)
	if err != nil {
		t.Fatal(err)
	}
	return os
}

package orderbackend

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisMultiWinConsumer: consumers on the Redis wins queue (docs/admission.md, "The wins
// queue": one stream entry per admission call, a win per user pair). Grouped Admits put seven wins
// (u5's two among them) in one entry behind a one-win entry. Consumer c1 reads both entries, makes
// the orders of two wins of the multi-win entry and acknowledges them, then dies; c2 claims both
// entries and makes the orders of the six other wins only: the acknowledged ones are not
// delivered again (no redelivery), and every win has one order.
func TestRedisMultiWinConsumer(t *testing.T) {
	e := newRedisPostgres(t, testsrv.StartPostgres(t))
	ctx := context.Background()
	// One admission call in flight per activity: while the first is held, the others queue and
	// go together in the next call.
	s, err := redisstore.New(e.client, redisstore.Options{KeyPrefix: "seckill", AdmitBatch: 64, AdmitInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e.store = s // the env's own store shares e.client (closing it would close the client)
	e.openActivity(t, "msale", 20, 2, time.Minute)
	a, b, reqs := groupedAdmits(t, e, "msale",
		admission.Request{User: "u0", Qty: 1, RequestID: "r0"},
		admission.Request{User: "u1", Qty: 1, RequestID: "r1"}, admission.Request{User: "u2", Qty: 1, RequestID: "r2"},
		admission.Request{User: "u3", Qty: 2, RequestID: "r3"}, admission.Request{User: "u4", Qty: 1, RequestID: "r4"},
		admission.Request{User: "u5", Qty: 1, RequestID: "r5"}, admission.Request{User: "u6", Qty: 1, RequestID: "r6"},
		admission.Request{User: "u5", Qty: 1, RequestID: "r5b"})
	if len(a) != 1 || len(b) != 7 {
		t.Fatalf("entries of %d and %d wins, want 1 and 7", len(a), len(b))
	}
	all := append(slices.Clone(a), b...)
	var u3 string // u3's reservation, of 2 items
	for r, q := range reqs {
		if q.User == "u3" {
			u3 = r
		}
	}

	// c1's life: read both entries, make and publish two orders of a, acknowledge them, die.
	if err := e.store.EnsureGroup(ctx, "msale", DefaultGroup); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.EnsureStock(ctx, "msale", 20); err != nil {
		t.Fatal(err)
	}
	ws, err := e.store.ReadGroup(ctx, "msale", DefaultGroup, "c1", 64, 0, false)
	if err != nil || len(ws) != 8 || ws[0].ReservationID != a[0] || ws[1].ReservationID != b[0] {
		t.Fatalf("read = %+v, %v; want the 8 wins, the one-win entry first", ws, err)
	}
	first := map[string]string{}
	for _, w := range ws[1:3] {
		o, _, err := e.repo.CreateOrder(ctx, NewOrder{ID: NewOrderID(), Activity: w.Activity, ReservationID: w.ReservationID,
			User: w.User, Qty: w.Qty, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if err := publish(ctx, e.store, w.Activity, w.User, resultOf(o)); err != nil {
			t.Fatal(err)
		}
		first[w.ReservationID] = o.ID
	}
	if err := e.store.Ack(ctx, "msale", DefaultGroup, ws[1].ID, ws[2].ID); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.Backlog(ctx, "msale", DefaultGroup); err != nil || n != 6 {
		t.Fatalf("backlog after c1's partial ack = %d, %v; want 6", n, err)
	}

	// c2 claims the entries once they are idle, and does the rest.
	m := new(Metrics)
	e.startConsumer(t, "msale", e.consumerOpts("c2", m))
	eventually(t, "six orders made by c2", func() bool { return m.OrdersCreated.Load() == 6 })
	eventually(t, "backlog 0", func() bool {
		n, err := e.store.Backlog(ctx, "msale", DefaultGroup)
		return err == nil && n == 0
	})
	if m.Redelivered.Load() != 0 {
		t.Errorf("%d wins delivered again: acknowledged wins must not be", m.Redelivered.Load())
	}
	orders := e.orders(t, "msale")
	var got []string
	byUser := map[string]int{}
	for _, o := range orders {
		got = append(got, o.ReservationID)
		byUser[o.User]++
		if id, ok := first[o.ReservationID]; ok && id != o.ID {
			t.Errorf("order %s for %s is not the one c1 made", o.ID, o.ReservationID)
		}
		if o.ReservationID == u3 && (o.User != "u3" || o.Qty != 2) {
			t.Errorf("order of %s = %+v, want u3's 2 items", u3, o)
		}
	}
	slices.Sort(got)
	slices.Sort(all)
	if !slices.Equal(got, all) {
		t.Fatalf("orders for %v, want one per win %v", got, all)
	}
	if byUser["u5"] != 2 {
		t.Errorf("u5 has %d orders, want 2 (two wins in one entry)", byUser["u5"])
	}
	for _, u := range []string{"u3", "u6"} {
		eventually(t, "result of "+u, func() bool {
			r := e.result(t, "msale", u)
			return r.Code == resultPending
		})
	}
	if p, err := e.store.ReadGroup(ctx, "msale", DefaultGroup, "c2", 64, 0, true); err != nil || len(p) != 0 {
		t.Fatalf("c2's pending = %+v, %v; want none", p, err)
	}
}

// TestRedisMultiWinPoisonWin: one poison win of a multi-win entry of the Redis wins queue
// (docs/admission.md, "The wins queue"). Concurrent Admits on a store with group admission put
// several wins in one stream entry; the database refuses the order of one of them every time (a
// trigger on its reservation). The consumer dead-letters that win after MaxDeliveries and gives its items back
// once; the entry's other wins, and every other win, become one order each; the entry is fully
// acknowledged. A restarted consumer's releaseDeadLetters does not give the items back again.
func TestRedisMultiWinPoisonWin(t *testing.T) {
	e := newRedisPostgres(t, testsrv.StartPostgres(t))
	ctx := context.Background()
	s := e.store // group admission (AdmitBatch 64, the default)
	const act, stock = "mpoison", 200
	e.openActivity(t, act, stock, 2, time.Minute)

	// Rounds of concurrent admissions until some entry holds 2+ wins (group admission: callers
	// that arrive while a script call is in flight share the next one).
	type win struct {
		user string
		qty  int64
	}
	wins := map[string]win{} // reservation -> its user and qty
	byEntry := map[string][]string{}
	var multi string
	for round := 0; multi == "" && round < 5; round++ {
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		gate := make(chan struct{})
		for i := range 24 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				u, q := fmt.Sprintf("u%d-%02d", round, i), int64(1+i%2)
				<-gate
				d, err := s.Admit(ctx, admission.Request{Activity: act, User: u, Qty: q, RequestID: "req-" + u})
				if err != nil || d.Outcome != admission.Won {
					t.Errorf("admit %s: %+v, %v", u, d, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				wins[d.ReservationID] = win{u, q}
			}()
		}
		close(gate)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		byEntry = map[string][]string{}
		for r := range wins {
			i := strings.LastIndexByte(r, '-')
			byEntry[r[:i]] = append(byEntry[r[:i]], r)
		}
		for en, rs := range byEntry {
			if len(rs) >= 2 && (multi == "" || len(rs) > len(byEntry[multi])) {
				multi = en
			}
		}
	}
	if multi == "" {
		t.Fatalf("no entry with 2+ wins among %d entries", len(byEntry))
	}
	// The entry in the stream really carries those wins (user/qty pairs after its first fields).
	xs, err := e.client.XRange(ctx, "seckill:{"+act+"}:orders", multi, multi).Result()
	if err != nil || len(xs) != 1 {
		t.Fatalf("entry %s: %+v, %v", multi, xs, err)
	}
	entryWins := byEntry[multi]
	slices.SortFunc(entryWins, func(a, b string) int { return winNumber(t, a) - winNumber(t, b) })
	victim := entryWins[1] // not the entry's first win: its neighbours on both sides must be ordered
	bad := wins[victim]
	t.Logf("%d wins in %d entries; entry %s has %d wins; poison win %s (%s, qty %d)",
		len(wins), len(byEntry), multi, len(entryWins), victim, bad.user, bad.qty)

	e.exec(t, fmt.Sprintf(`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.reservation_id = '%s' THEN RAISE EXCEPTION 'poisoned order'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER poison BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION poison();`, victim), "")
	before, err := s.Remaining(ctx, act)
	if err != nil {
		t.Fatal(err)
	}

	m := new(Metrics)
	stop := e.startConsumer(t, act, e.consumerOpts("c1", m))
	eventually(t, "a dead letter", func() bool { return m.DeadLettered.Load() == 1 })
	eventually(t, "an order per other win", func() bool { return len(e.orders(t, act)) == len(wins)-1 })
	eventually(t, "backlog 0", func() bool {
		n, err := s.Backlog(ctx, act, DefaultGroup)
		return err == nil && n == 0
	})
	eventually(t, "failed result of the poison's buyer", func() bool { return e.result(t, act, bad.user).Code == resultFailed })
	stop()

	dead, err := s.DeadLetters(ctx, act, 10)
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters = %+v, %v; want 1", dead, err)
	}
	if d := dead[0]; d.ReservationID != victim || d.User != bad.user || d.Qty != bad.qty || d.Deliveries != 3 ||
		!strings.HasPrefix(d.Reason, reasonPoison) || !strings.Contains(d.Reason, "poisoned order") {
		t.Errorf("dead letter = %+v; want %s of %s, qty %d, poison after 3 deliveries", d, victim, bad.user, bad.qty)
	}
	orders := e.orders(t, act)
	seen := map[string]int{}
	for _, o := range orders {
		seen[o.ReservationID]++
		if w, ok := wins[o.ReservationID]; !ok || w.user != o.User || w.qty != o.Qty {
			t.Errorf("order %+v matches no win (%+v)", o, w)
		}
	}
	for r := range wins {
		if want := map[bool]int{true: 0, false: 1}[r == victim]; seen[r] != want {
			t.Errorf("win %s has %d orders, want %d", r, seen[r], want)
		}
	}
	if m.OrdersCreated.Load() != int64(len(wins)-1) || m.Released.Load() != 1 {
		t.Errorf("orders created %d, released %d; want %d and 1", m.OrdersCreated.Load(), m.Released.Load(), len(wins)-1)
	}
	checkStock := func(when string) {
		t.Helper()
		if n, err := s.Remaining(ctx, act); err != nil || n != before+bad.qty {
			t.Fatalf("%s: remaining = %d, %v; want %d + the poison's %d", when, n, err, before, bad.qty)
		}
	}
	checkStock("after the dead letter")
	// Fully acknowledged: nothing pending in the group, no partial-ack record left for the entry.
	if p, err := e.client.XPending(ctx, "seckill:{"+act+"}:orders", DefaultGroup).Result(); err != nil || p.Count != 0 {
		t.Errorf("pending entries = %+v, %v; want none", p, err)
	}
	// (ack.lua: field "<entry> <group>" lists a partly acknowledged entry's wins; "n <group>" counts.)
	if fs, err := e.client.HKeys(ctx, "seckill:{"+act+"}:acked").Result(); err != nil || !slices.Equal(fs, []string{"n " + DefaultGroup}) {
		t.Errorf(":acked fields = %q, %v; want only the group's count once every win is acknowledged", fs, err)
	}

	// Restarts: each one repeats the release of the poison dead letter; the items stay given back once.
	for i := range 2 {
		m2 := new(Metrics)
		c, err := NewConsumer(s, e.repo, act, e.consumerOpts(fmt.Sprintf("r%d", i), m2))
		if err != nil {
			t.Fatal(err)
		}
		c.releaseDeadLetters(ctx)
		if m2.Released.Load() != 0 || m2.ReleaseUnknown.Load() != 0 {
			t.Errorf("restart %d: released %d, unknown %d; want 0 (released already)", i, m2.Released.Load(), m2.ReleaseUnknown.Load())
		}
		checkStock(fmt.Sprintf("after restart %d", i))
	}
	m3 := new(Metrics)
	stop = e.startConsumer(t, act, e.consumerOpts("c2", m3))
	// The poison's items sell again, and the restarted consumer orders them.
	d := e.admit(t, act, "late", bad.qty)
	eventually(t, "the late buyer's order", func() bool { return e.result(t, act, "late").Code == resultPending })
	stop()
	if m3.Released.Load() != 0 || m3.OrdersCreated.Load() != 1 {
		t.Errorf("restarted consumer released %d, ordered %d; want 0 and 1 (%s)", m3.Released.Load(), m3.OrdersCreated.Load(), d.ReservationID)
	}
	if n, err := s.Remaining(ctx, act); err != nil || n != before {
		t.Errorf("after the late sale: remaining = %d, %v; want %d", n, err, before)
	}
	e.requireReconciled(t, act)
}

// winNumber is k of a reservation "E-k" (win k of stream entry E).
func winNumber(t *testing.T, r string) int {
	t.Helper()
	k, err := strconv.Atoi(r[strings.LastIndexByte(r, '-')+1:])
	if err != nil {
		t.Fatalf("reservation %q is not E-k: %v", r, err)
	}
	return k
}

// groupedAdmits admits lead alone and then the rest in one script call, through the store's
// Admit (group admission with one call in flight per activity, AdmitInFlight 1): CLIENT PAUSE
// WRITE holds lead's call in the server while the others queue behind it in the store. It
// returns the reservations of the two calls' wins, the rest's in their order in the entry (win 1
// first), and the request of each reservation; it fails unless each call's wins share one stream
// entry.
func groupedAdmits(t *testing.T, e *env, act string, lead admission.Request, rest ...admission.Request) (first, group []string, reqs map[string]admission.Request) {
	t.Helper()
	ctx := context.Background()
	if err := e.client.Do(ctx, "CLIENT", "PAUSE", "3000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused := false
	defer func() {
		if !unpaused {
			_ = e.client.Do(ctx, "CLIENT", "UNPAUSE").Err()
		}
	}()
	type answer struct {
		d   admission.Decision
		err error
		req admission.Request
	}
	reqs = map[string]admission.Request{}
	admit := func(r admission.Request) chan answer {
		r.Activity = act
		ch := make(chan answer, 1)
		go func() {
			d, err := e.store.Admit(ctx, r)
			ch <- answer{d, err, r}
		}()
		return ch
	}
	leadCh := admit(lead)
	// The lead's call is in the server, held by the pause.
	eventually(t, "the first admission held", func() bool {
		info, err := e.client.Info(ctx, "clients").Result()
		return err == nil && strings.Contains(info, "blocked_clients:1\r")
	})
	chs := make([]chan answer, len(rest))
	for i, r := range rest {
		chs[i] = admit(r)
	}
	time.Sleep(200 * time.Millisecond) // the callers queue behind the held call
	if err := e.client.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
		t.Fatal(err)
	}
	unpaused = true
	reservations := func(chs ...chan answer) []string {
		var ids []string
		entry := ""
		for _, ch := range chs {
			a := <-ch
			if a.err != nil || a.d.Outcome != admission.Won || a.d.Replayed {
				t.Fatalf("admit: %+v, %v; want a new win", a.d, a.err)
			}
			e := a.d.ReservationID[:strings.LastIndexByte(a.d.ReservationID, '-')]
			if entry != "" && e != entry {
				t.Fatalf("wins of one call in entries %s and %s: the queued admissions did not share a call", entry, e)
			}
			entry = e
			ids = append(ids, a.d.ReservationID)
			reqs[a.d.ReservationID] = a.req
		}
		return ids
	}
	first = reservations(leadCh)
	group = reservations(chs...)
	slices.SortFunc(group, func(a, b string) int { return winNumber(t, a) - winNumber(t, b) })
	return first, group, reqs
}

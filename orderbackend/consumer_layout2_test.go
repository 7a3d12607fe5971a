package orderbackend

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisLayout2Consumer: consumers on a layout-2 wins queue (docs/admission.md, "The wins
// queue": one stream entry per admission call, a win per user pair). Consumer c1 reads two
// multi-win entries, makes the orders of two wins of the first and acknowledges them, then dies;
// c2 claims both entries and makes the orders of the five other wins only: the acknowledged
// ones are not delivered again (no redelivery), and every win has one order.
func TestRedisLayout2Consumer(t *testing.T) {
	e := newRedisPostgres(t, testsrv.StartPostgres(t))
	ctx := context.Background()
	e.openActivity(t, "l2sale", 20, 2, time.Minute)
	meta := "seckill:{l2sale}:meta"
	if err := e.client.HSet(ctx, meta, "layout", "2").Err(); err != nil {
		t.Fatal(err)
	}
	// The prototype's admit.lua (admission/testdata/wonlayout) with admit_v2.lua's wins count.
	src, err := os.ReadFile("../admission/testdata/wonlayout/admit.lua")
	if err != nil {
		t.Fatal(err)
	}
	const xadd = "local e = redis.call('XADD', unpack(x)) .. '-'\n"
	if strings.Count(string(src), xadd) != 1 {
		t.Fatal("the prototype admit.lua no longer has its one XADD line")
	}
	admit := redis.NewScript(strings.Replace(string(src), xadd, xadd+"  redis.call('HINCRBY', KEYS[1], 'wins', nw)\n", 1))
	keys := []string{meta, "seckill:{l2sale}:stock", "seckill:{l2sale}:users", "seckill:{l2sale}:orders"}
	call := func(args ...any) []string {
		t.Helper()
		reply, err := admit.Run(ctx, e.client, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := 0; i < len(reply); i += 4 {
			if reply[i].(int64) != 1 {
				t.Fatalf("admit %v: %v", args, reply)
			}
			ids = append(ids, reply[i+2].(string))
		}
		return ids
	}
	a := call("u1", "1", "r1", "u2", "1", "r2", "u3", "2", "r3", "u4", "1", "r4")
	b := call("u5", "1", "r5", "u6", "1", "r6", "u5", "1", "r5b")
	all := append(slices.Clone(a), b...)

	// c1's life: read both entries, make and publish two orders of a, acknowledge them, die.
	if err := e.store.EnsureGroup(ctx, "l2sale", DefaultGroup); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.EnsureStock(ctx, "l2sale", 20); err != nil {
		t.Fatal(err)
	}
	ws, err := e.store.ReadGroup(ctx, "l2sale", DefaultGroup, "c1", 64, 0, false)
	if err != nil || len(ws) != 7 {
		t.Fatalf("read = %+v, %v; want 7 wins", ws, err)
	}
	first := map[string]string{}
	for _, w := range ws[:2] {
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
	if err := e.store.Ack(ctx, "l2sale", DefaultGroup, ws[0].ID, ws[1].ID); err != nil {
		t.Fatal(err)
	}
	if n, err := e.store.Backlog(ctx, "l2sale", DefaultGroup); err != nil || n != 5 {
		t.Fatalf("backlog after c1's partial ack = %d, %v; want 5", n, err)
	}

	// c2 claims the entries once they are idle, and does the rest.
	m := new(Metrics)
	e.startConsumer(t, "l2sale", e.consumerOpts("c2", m))
	eventually(t, "five orders made by c2", func() bool { return m.OrdersCreated.Load() == 5 })
	eventually(t, "backlog 0", func() bool {
		n, err := e.store.Backlog(ctx, "l2sale", DefaultGroup)
		return err == nil && n == 0
	})
	if m.Redelivered.Load() != 0 {
		t.Errorf("%d wins delivered again: acknowledged wins must not be", m.Redelivered.Load())
	}
	orders := e.orders(t, "l2sale")
	var got []string
	byUser := map[string]int{}
	for _, o := range orders {
		got = append(got, o.ReservationID)
		byUser[o.User]++
		if id, ok := first[o.ReservationID]; ok && id != o.ID {
			t.Errorf("order %s for %s is not the one c1 made", o.ID, o.ReservationID)
		}
		if o.ReservationID == a[2] && (o.User != "u3" || o.Qty != 2) {
			t.Errorf("order of %s = %+v, want u3's 2 items", a[2], o)
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
			r := e.result(t, "l2sale", u)
			return r.Code == resultPending
		})
	}
	if p, err := e.store.ReadGroup(ctx, "l2sale", DefaultGroup, "c2", 64, 0, true); err != nil || len(p) != 0 {
		t.Fatalf("c2's pending = %+v, %v; want none", p, err)
	}
}

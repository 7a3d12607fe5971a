package orderbackend

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

// TestBacklog: Backend.Backlog counts each activity's wins its consumer group has not
// acknowledged (none before the group exists), and the collector exports them.
func TestBacklog(t *testing.T) {
	ctx := context.Background()
	store := localstore.NewMemory(localstore.MemoryOptions{})
	t.Cleanup(func() { _ = store.Close() })
	repo, err := NewSQLite(ctx, filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = repo.Close() })
	b, err := New(Config{Store: store, Repo: repo, Name: "n1", Consumer: ConsumerOptions{Group: "g"}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, id := range []string{"a", "b"} {
		if _, err := store.Define(ctx, admission.Activity{ID: id, Stock: 10, Limit: 1,
			Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []string{"u1", "u2", "u3"} {
		if d, err := store.Admit(ctx, admission.Request{Activity: "a", User: u, Qty: 1, RequestID: "r"}); err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %s: %+v %v", u, d, err)
		}
	}
	if got := b.Backlog(ctx); len(got) != 0 {
		t.Errorf("backlog before any group exists = %v, want none", got)
	}
	if err := store.EnsureGroup(ctx, "a", "g"); err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureGroup(ctx, "b", "g"); err != nil {
		t.Fatal(err)
	}
	ws, err := store.ReadGroup(ctx, "a", "g", "n1", 2, 0, false)
	if err != nil || len(ws) != 2 {
		t.Fatalf("read: %v %v", ws, err)
	}
	if err := store.Ack(ctx, "a", "g", ws[0].ID); err != nil {
		t.Fatal(err)
	}
	got := b.Backlog(ctx)
	if len(got) != 2 || got["a"] != 2 || got["b"] != 0 {
		t.Errorf("backlog = %v, want a: 2 (one pending, one never read), b: 0", got)
	}

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewBacklogCollector(b.Backlog))
	want := `# HELP caddy_seckill_orders_backlog Wins in the activity's queue the order backend's consumer group has not acknowledged yet (not yet an order or a dead letter).
# TYPE caddy_seckill_orders_backlog gauge
caddy_seckill_orders_backlog{activity="a"} 2
caddy_seckill_orders_backlog{activity="b"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "caddy_seckill_orders_backlog"); err != nil {
		t.Error(err)
	}
}

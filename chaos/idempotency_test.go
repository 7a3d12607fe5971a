package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestOneKeyManyRetries is scenario 6: one user sends 100 concurrent buys with one
// Idempotency-Key, spread over two gateways. Exactly one admission: every answer is 202 with one
// reservation id, the stock moved by exactly the quantity, the queue gained one entry, and
// reconcile passes. No user rate limit is configured (the suite configures none), so the 100
// requests all reach the admission. The quantity is 2 under a limit of 4, so a second admission
// of the key would not be hidden by the limit.
func TestOneKeyManyRetries(t *testing.T) {
	const (
		requests = 100
		qty      = 2
	)
	m := currentMode()
	rounds := 2
	if m.full {
		rounds = 10
	}
	act := newActivity("one-key", m.stock, 2*qty)
	e := newEnv(t, act)
	gws := []*gateway{e.startGateway("gateway-1"), e.startGateway("gateway-2")}
	e.startBackend("backend", 30*time.Second)

	d := newDriver(t, act.id, gws...)
	d.body = fmt.Sprintf(`{"qty":%d}`, qty)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for round := 1; round <= rounds; round++ {
		b := makeBuyers(t, fmt.Sprintf("same%d", round), 1, 1)[0]
		d.expected.Add(1)
		path := d.call(ctx, "path", b, 0, "/seckill/"+act.id+"/path", "{}")
		if path.status != http.StatusOK || path.path == "" {
			t.Fatalf("path: %s", path)
		}
		remaining0, queued0 := e.remaining(), e.queued()

		start := make(chan struct{})
		answers := make([]attempt, requests)
		var wg sync.WaitGroup
		for i := range requests {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				answers[i] = d.buyPath(ctx, b, i%len(gws), path.path)
			}()
		}
		close(start)
		wg.Wait()

		resv := map[string]int{}
		for _, a := range answers {
			if a.status != http.StatusAccepted {
				t.Errorf("round %d: %s, want 202", round, a)
				continue
			}
			resv[a.reservation]++
		}
		if len(resv) != 1 {
			t.Errorf("round %d: %d reservation ids in the answers, want one: %v", round, len(resv), resv)
		}
		if moved := remaining0 - e.remaining(); moved != qty {
			t.Errorf("round %d: the stock moved by %d, want %d", round, moved, qty)
		}
		if gained := e.queued() - queued0; gained != 1 {
			t.Errorf("round %d: the queue gained %d entries, want 1", round, gained)
		}
		tries := count(d.snapshot(), func(a attempt) bool { return a.user == b.user && a.call == "buy" })
		t.Logf("round %d: %d buys with one key (%d calls with retries) over %d gateways: reservations %v",
			round, requests, tries, len(gws), resv)
	}
	t.Logf("answers: %s", summary(d.snapshot()))
	e.verify(d)
}

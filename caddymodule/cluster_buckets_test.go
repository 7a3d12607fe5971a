package caddymodule_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// bucketSale is the Caddyfile block of an activity open now, with its stock split into buckets
// and a payment window longer than the test, so that no win is released behind its back.
func bucketSale(id string, stock, limit, buckets int) string {
	now := time.Now()
	return fmt.Sprintf("activity %s {\n\tstock %d\n\tlimit %d\n\tstart %s\n\tend %s\n\tpay_within 15m\n\tbuckets %d\n}\n",
		id, stock, limit, rfc3339(now.Add(-time.Minute)), rfc3339(now.Add(time.Hour)), buckets)
}

// TestClusterBuckets sells activities split into buckets through the real Caddy, with the
// embedded order backend, on a private Redis Cluster (3 masters + 3 replicas):
//   - "hot", 8 buckets: 150 buyers with 3 buy intents each rush 120 items under a limit of 2;
//     exactly the stock is won, nobody above the limit, every 202 is exactly one order of its
//     buyer, reconcile passes, and the status, admin API and metrics show one sold-out activity;
//   - "skew", 8 buckets: every buyer's home bucket is the same one, and the sale still sells out
//     (the stock of the other seven is pulled in);
//   - "whole", 8 buckets: a 202 and the status give the activity's remaining stock, not a bucket's;
//   - "pair", 2 items in 2 buckets: the order flow (pay, the payment window's release back to the
//     win's bucket, a cancel) with the stock coming back and being sold again.
func TestClusterBuckets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	cl := testsrv.StartCluster(t)
	db := filepath.Join(t.TempDir(), "orders.db")
	// pair keeps the short payment window of the order flow.
	pair := strings.Replace(saleBlock("pair", 2), "}\n", "\tbuckets 2\n}\n", 1)
	seckill := jwtBlock + "captcha off\nurl_secret u\nstore redis " + strings.Join(cl.Addrs(), " ") + " {\n\tcluster\n}\n" +
		ordersOption("sqlite "+db) + bucketSale("hot", 120, 2, 8) + bucketSale("skew", 64, 1, 8) + pair +
		bucketSale("whole", 80, 1, 8)
	s := startSale(t, seckill)

	masters := map[string]bool{}
	for i := range 8 {
		masters[cl.MasterOf(fmt.Sprintf("{hot#%d/8}", i)).Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the 8 buckets of hot live on %d master(s), want them spread", len(masters))
	}

	t.Run("hot", func(t *testing.T) {
		users := make([]string, 150)
		for i := range users {
			users[i] = fmt.Sprintf("hot-%03d", i)
		}
		wins := bucketRush(t, s.Client, "hot", users, 3)
		checkBucketSale(t, s, db, "hot", 120, 2, 8, wins)
	})

	t.Run("skew", func(t *testing.T) {
		before := bucketMetrics(t, s.Client)
		// 100 buyers whose home bucket is bucket 3: they alone must buy the whole stock.
		var users []string
		for i := 0; len(users) < 100; i++ {
			if u := fmt.Sprintf("skew-%d", i); admission.HomeBucket(u, 8) == 3 {
				users = append(users, u)
			}
		}
		wins := bucketRush(t, s.Client, "skew", users, 1)
		checkBucketSale(t, s, db, "skew", 64, 1, 8, wins)
		after := bucketMetrics(t, s.Client)
		if after["dry_pulls"] <= before["dry_pulls"] || after["transfers"] <= before["transfers"] {
			t.Errorf("a sale from one bucket pulled no stock: bucket metrics %v before, %v after", before, after)
		}
		// The seven other buckets held 56 items; all of them reached bucket 3.
		if moved := after["items_moved"] - before["items_moved"]; moved < 56 {
			t.Errorf("%d items moved between buckets, want at least the 56 of the other buckets", moved)
		}
	})

	// The answers give the whole activity's stock, never a bucket's.
	t.Run("whole", func(t *testing.T) {
		expect(t, "status", s.Client.Get("/seckill/whole", ""), http.StatusOK, "ok")
		alice := token(t, "alice")
		path := buyPath(t, s.Client, "whole", alice)
		won := s.Client.Post(path, alice, "", "Idempotency-Key", "a1")
		expect(t, "alice buys", won, http.StatusAccepted, "queued")
		if n := won.Num("remaining"); n != 79 {
			t.Errorf("the 202 says %d remaining, want 79 of the activity's 80", n)
		}
		expect(t, "alice again", s.Client.Post(path, alice, "", "Idempotency-Key", "a2"), http.StatusConflict, "limit_reached")
		if st := s.Client.Get("/seckill/whole", ""); st.Num("remaining") != 79 || st.Str("state") != "open" {
			t.Errorf("status after a win and a refusal: %s, want open with 79 remaining", st)
		}
	})

	t.Run("pair", func(t *testing.T) {
		orderFlow(t, s.Client, "pair")
		eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })
	})
}

// bucketRush has every user ask for a buy path and then send intents concurrent buys, each with
// its own Idempotency-Key, retrying a 503 or 429 with the same key until a definite answer. It
// returns the reservations each user was answered 202 for.
func bucketRush(t *testing.T, c *client, activity string, users []string, intents int) map[string][]string {
	t.Helper()
	var (
		mu    sync.Mutex
		wins  = map[string][]string{}
		codes = map[string]int{}
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 48)
	)
	// Every buyer has its path before the first buy: a path call after the sell-out is refused.
	toks, paths := make([]string, len(users)), make([]string, len(users))
	for i, u := range users {
		toks[i] = token(t, u)
		paths[i] = buyPath(t, c, activity, toks[i])
	}
	for i, u := range users {
		tok, path := toks[i], paths[i]
		for k := range intents {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				key := fmt.Sprintf("%s-k%d", u, k)
				var r response
				for try := 0; ; try++ {
					r = c.Post(path, tok, "", "Idempotency-Key", key)
					if (r.Status != http.StatusServiceUnavailable && r.Status != http.StatusTooManyRequests) || try == 200 {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				codes[fmt.Sprintf("%d %s", r.Status, r.Code())]++
				switch {
				case r.Status == http.StatusAccepted && r.Code() == "queued":
					wins[u] = append(wins[u], r.Str("reservation_id"))
				case r.Status == http.StatusGone && r.Code() == "sold_out":
				case r.Status == http.StatusConflict && r.Code() == "limit_reached":
				default:
					t.Errorf("%s buy %s: %s", u, key, r)
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("%s: answers %v", activity, codes)
	return wins
}

// checkBucketSale checks a split activity after its rush: exactly the stock won, nobody above the
// limit; the status, the admin API and reconcile see one sold-out activity; every 202 is exactly
// one order of its buyer in the order database.
func checkBucketSale(t *testing.T, s sale, db, id string, stock, limit, buckets int, wins map[string][]string) {
	t.Helper()
	won := 0
	for u, rs := range wins {
		won += len(rs)
		if len(rs) > limit {
			t.Errorf("%s won %d items, limit %d", u, len(rs), limit)
		}
	}
	if won != stock {
		t.Errorf("%d items won, stock %d: every bucket must sell out, and never beyond", won, stock)
	}

	st := s.Client.Get("/seckill/"+id, "")
	if st.Status != http.StatusOK || st.Str("state") != "sold_out" || st.Num("remaining") != 0 {
		t.Errorf("status of %s after the rush: %s, want sold_out with 0 remaining", id, st)
	}
	status, body := s.AdminCall(t, http.MethodGet, "/seckill/activities", "")
	var acts []struct {
		ID        string `json:"id"`
		Stock     int64  `json:"stock"`
		Buckets   int    `json:"buckets"`
		Remaining int64  `json:"remaining"`
		Sold      int64  `json:"sold"`
	}
	if err := json.Unmarshal(body, &acts); status != http.StatusOK || err != nil {
		t.Fatalf("admin activities: %d %s (%v)", status, body, err)
	}
	var found bool
	for _, a := range acts {
		if strings.Contains(a.ID, "#") {
			t.Errorf("the admin API lists a bucket as an activity: %+v", a)
		}
		if a.ID == id {
			found = true
			if a.Stock != int64(stock) || a.Buckets != buckets || a.Remaining != 0 || a.Sold != int64(stock) {
				t.Errorf("admin API shows %+v, want stock %d in %d buckets, all sold", a, stock, buckets)
			}
		}
	}
	if !found {
		t.Errorf("admin API does not list %s: %s", id, body)
	}
	eventually(t, "reconcile", func() (bool, string) { return s.ReconcileOK(t) })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	repo, err := orderbackend.OpenRepository(ctx, "sqlite", db)
	if err != nil {
		t.Fatalf("open the order database: %v", err)
	}
	defer func() { _ = repo.Close() }()
	orders, err := repo.Orders(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	byResv := map[string]orderbackend.Order{}
	for _, o := range orders {
		if _, dup := byResv[o.ReservationID]; dup {
			t.Errorf("reservation %s has two orders", o.ReservationID)
		}
		byResv[o.ReservationID] = o
	}
	if len(orders) != stock {
		t.Errorf("%d orders, want one per item: %d", len(orders), stock)
	}
	for u, rs := range wins {
		for _, r := range rs {
			if o, ok := byResv[r]; !ok || o.User != u || o.Qty != 1 {
				t.Errorf("the 202 of %s with reservation %s is order %+v (found %v), want one order of that buyer", u, r, o, ok)
			}
		}
	}
}

// bucketMetrics reads the caddy_seckill_bucket_* counters from the site's metrics, by the name's
// middle ("transfers", "items_moved", "transfers_recovered", "dry_pulls").
func bucketMetrics(t *testing.T, c *client) map[string]int64 {
	t.Helper()
	res, err := c.HTTP.Get(c.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	m := map[string]int64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if rest, isBucket := strings.CutPrefix(name, "caddy_seckill_bucket_"); ok && isBucket {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("metric %s: %v", sc.Text(), err)
			}
			m[strings.TrimSuffix(rest, "_total")] = int64(f)
		}
	}
	for _, want := range []string{"transfers", "items_moved", "transfers_recovered", "dry_pulls"} {
		if _, ok := m[want]; !ok {
			t.Fatalf("no caddy_seckill_bucket_%s_total in the metrics (have %v)", want, m)
		}
	}
	return m
}

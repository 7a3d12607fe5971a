package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// TestRunAndReconcile runs the command as an operator would, against a private redis-server and
// an SQLite file: wins become orders served over HTTP, reconcile passes, and a win nobody
// processes makes reconcile exit 1.
func TestRunAndReconcile(t *testing.T) { runAndReconcile(t, 0) }

// TestRunAndReconcileBuckets is TestRunAndReconcile on an activity split into 4 buckets: the
// command needs nothing to know of them, the store shows it one activity.
func TestRunAndReconcileBuckets(t *testing.T) { runAndReconcile(t, 4) }

func runAndReconcile(t *testing.T, buckets int) {
	ctx := context.Background()
	srv, store := saleWithWins(t, buckets, "alice", "bob")

	secret := "0123456789abcdef0123456789abcdef"
	t.Setenv("TEST_JWT_SECRET", secret)
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"-redis", srv.Addr, "-db", "sqlite:" + filepath.Join(t.TempDir(), "orders.db")}
	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan int, 1)
	var runErr lockedBuffer
	go func() {
		exited <- run(runCtx, append([]string{"run", "-listen", fmt.Sprint("127.0.0.1:", port),
			"-jwt-secret-env", "TEST_JWT_SECRET", "-name", "test", "-price", "phone-1001=199.00:USD", "-title", "phone-1001=Phone X"},
			common...), &bytes.Buffer{}, &runErr)
	}()

	// The backend discovers the activity and turns both wins into orders.
	var res admission.Result
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res, err = store.GetResult(ctx, "phone-1001", "alice"); err == nil && res.Code == "pending_payment" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's order never appeared (%+v, %v); run: %s", res, err, runErr.String())
		}
	}
	tok, err := jwtauth.Mint(jwtauth.MintConfig{Secret: []byte(secret), Subject: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/orders/%s", port, res.OrderID), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != 200 || body["code"] != "pending_payment" || body["order_id"] != res.OrderID ||
		body["amount"] != 19900.0 || body["currency"] != "USD" || body["title"] != "Phone X" {
		t.Fatalf("GET order = %d %v", resp.StatusCode, body)
	}
	// Alice pays (the mock provider); the reconcile below counts the charge.
	req, _ = http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/orders/%s/pay", port, res.OrderID), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pay = %d", resp.StatusCode)
	}

	// Bob's order is pending: the sale is not finished, archive refuses it.
	var out, errOut bytes.Buffer
	if code := run(ctx, append([]string{"archive", "-activity", "phone-1001"}, common...), &out, &errOut); code != exitError ||
		!strings.Contains(errOut.String(), "not finished") {
		t.Fatalf("archive with a pending order = %d: %s%s", code, out.String(), errOut.String())
	}
	// Bob gives up.
	bres, err := store.GetResult(ctx, "phone-1001", "bob")
	if err != nil {
		t.Fatal(err)
	}
	btok, err := jwtauth.Mint(jwtauth.MintConfig{Secret: []byte(secret), Subject: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	req, _ = http.NewRequest("POST", fmt.Sprintf("http://127.0.0.1:%d/orders/%s/cancel", port, bres.OrderID), nil)
	req.Header.Set("Authorization", "Bearer "+btok)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("cancel = %d", resp.StatusCode)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out.Reset()
		if code := run(ctx, append([]string{"reconcile"}, common...), &out, &errOut); code == exitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconcile never passed:\n%s%s", out.String(), errOut.String())
		}
	}
	if !strings.Contains(out.String(), "OK: every invariant holds") ||
		!strings.Contains(out.String(), "money:    charges 1 (199.00), refunds 0 (0.00), charged unpaid 0, unsettled payments 0") {
		t.Errorf("reconcile output:\n%s", out.String())
	}
	// The sale is finished and reconciled: archive moves both orders, the API still reads them,
	// reconcile still holds, and a second run moves nothing.
	out.Reset()
	if code := run(ctx, append([]string{"archive", "-activity", "phone-1001"}, common...), &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "orders hot 2 -> 0, archived 0 -> 2; moved 2 orders and 1 payment attempts in 1 batches") {
		t.Fatalf("archive = %d: %s%s", code, out.String(), errOut.String())
	}
	req, _ = http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/orders/%s", port, res.OrderID), nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	body = nil
	_ = json.NewDecoder(resp.Body).Decode(&body)
	_ = resp.Body.Close()
	if resp.StatusCode != 200 || body["code"] != "paid" || body["order_id"] != res.OrderID {
		t.Fatalf("GET archived order = %d %v", resp.StatusCode, body)
	}
	out.Reset()
	if code := run(ctx, append([]string{"reconcile"}, common...), &out, &errOut); code != exitOK {
		t.Fatalf("reconcile after archive = %d:\n%s%s", code, out.String(), errOut.String())
	}
	out.Reset()
	if code := run(ctx, append([]string{"archive", "-activity", "phone-1001"}, common...), &out, &errOut); code != exitOK ||
		!strings.Contains(out.String(), "nothing to archive (2 orders archived, 0 in the hot table)") {
		t.Fatalf("second archive = %d: %s%s", code, out.String(), errOut.String())
	}
	stop()
	if code := <-exited; code != exitOK {
		t.Fatalf("run exited %d: %s", code, runErr.String())
	}

	// With the backend stopped, a new win is not an order: a violation, exit 1.
	if _, err := store.Admit(ctx, admission.Request{Activity: "phone-1001", User: "carol", Qty: 1, RequestID: "r"}); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, append([]string{"reconcile", "-activity", "phone-1001", "-json"}, common...), &out, &errOut); code != exitViolation {
		t.Fatalf("reconcile exit %d, want %d:\n%s%s", code, exitViolation, out.String(), errOut.String())
	}
	var reports []map[string]any
	if err := json.Unmarshal(out.Bytes(), &reports); err != nil || len(reports) != 1 || reports[0]["in_flight"] != 1.0 {
		t.Errorf("json report = %s (%v)", out.String(), err)
	}
}

func TestUsage(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{nil, {"bogus"}, {"reconcile"}, {"reconcile", "-redis", "x:1"}, {"reconcile", "-redis", "x:1", "-db", "mysql://x"}} {
		var out, errOut bytes.Buffer
		if code := run(ctx, args, &out, &errOut); code != exitError {
			t.Errorf("run %q = %d, want %d", args, code, exitError)
		}
		if errOut.Len() == 0 {
			t.Errorf("run %q said nothing on stderr", args)
		}
	}
}

// TestPaymentsFlag: an unknown provider, a Stripe key variable that is empty, a Stripe API base
// that is not a URL, a negative webhook tolerance, and a webhook provider without a URL or with
// a short secret stop run before it connects to anything.
func TestPaymentsFlag(t *testing.T) {
	t.Setenv("SECKILL_TEST_STRIPE_KEY", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-payments", "paypal"}, `-payments "paypal": want mock, stripe or webhook`},
		{[]string{"-payments", "stripe", "-stripe-secret-env", "PATH", "-stripe-webhook-tolerance", "-1s"}, "webhook_tolerance -1s is negative"},
		{[]string{"-payments", "webhook", "-webhook-secret-env", "PATH"}, `url "" is not an absolute http(s) URL`},
		{[]string{"-payments", "webhook", "-webhook-url", "https://pay.shop.example/seckill", "-webhook-secret-env", "SECKILL_TEST_STRIPE_KEY"},
			"secret (\"\"): 0 bytes: want at least 16"},
		{[]string{"-payments", "stripe", "-stripe-secret-env", "SECKILL_TEST_STRIPE_KEY"}, "secret_key is empty"},
		{[]string{"-payments", "stripe", "-stripe-secret-env", "PATH", "-stripe-api-base", "stripe.example"}, `api_base "stripe.example" is not an http(s) URL`},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), append([]string{"run"}, c.args...), &out, &errOut); code != exitError || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("run %q = %d, %q; want %d, %q", c.args, code, errOut.String(), exitError, c.want)
		}
	}
}

// saleWithWins starts a private redis-server holding the open activity phone-1001 (5 items, limit
// 1, split into buckets when buckets > 1) and one win for each of users, as the edge would have
// left them for the order backend.
func saleWithWins(t *testing.T, buckets int, users ...string) (*testsrv.Redis, *redisstore.Store) {
	t.Helper()
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, redisstore.Options{KeyPrefix: "seckill"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	def, err := store.Define(ctx, admission.Activity{ID: "phone-1001", Stock: 5, Limit: 1,
		Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute, Buckets: buckets}, false)
	if err != nil || (buckets > 1 && def.Buckets != buckets) {
		t.Fatalf("define = %+v, %v", def, err)
	}
	for _, u := range users {
		if d, err := store.Admit(ctx, admission.Request{Activity: "phone-1001", User: u, Qty: 1, RequestID: "r"}); err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %s = %+v, %v", u, d, err)
		}
	}
	return srv, store
}

// TestPartitionSubcommand: `orderbackend partition` rewrites an unpartitioned database, keeps its
// orders, and `run`'s -partitions must then match.
func TestPartitionSubcommand(t *testing.T) {
	pg := testsrv.StartPostgres(t)
	dsn := pg.Database(t, "obpart")
	ctx := context.Background()
	repo, err := orderbackend.NewPostgresWith(ctx, dsn, orderbackend.PostgresOptions{Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.EnsureStock(ctx, "a", 5); err != nil {
		t.Fatal(err)
	}
	o, _, err := repo.CreateOrder(ctx, orderbackend.NewOrder{ID: orderbackend.NewOrderID(), Activity: "a", ReservationID: "r1",
		User: "u1", Qty: 1, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	_ = repo.Close()
	var stdout, stderr strings.Builder
	if code := run(ctx, []string{"partition", "-db", dsn, "-partitions", "8"}, &stdout, &stderr); code != exitOK ||
		!strings.Contains(stdout.String(), "partitions: 1 -> 8; 1 orders") {
		t.Fatalf("partition = %d: %s %s", code, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := run(ctx, []string{"partition", "-db", "sqlite:x.db", "-partitions", "8"}, &stdout, &stderr); code != exitError ||
		!strings.Contains(stderr.String(), "postgres feature") {
		t.Fatalf("partition of sqlite = %d: %s", code, stderr.String())
	}
	var ce *orderbackend.PartitionsChangedError
	if _, err := orderbackend.OpenRepositoryWith(ctx, "postgres", dsn, orderbackend.PostgresOptions{Partitions: 2}); !errors.As(err, &ce) || ce.Have != 8 {
		t.Fatalf("partitions 2 after partition 8: %v", err)
	}
	r, err := orderbackend.OpenRepositoryWith(ctx, "postgres", dsn, orderbackend.PostgresOptions{Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	if got, err := r.BuyerOrder(ctx, "u1", o.ID); err != nil || got.ID != o.ID {
		t.Fatalf("order after partition = %+v, %v", got, err)
	}
}

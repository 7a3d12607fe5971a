package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

func TestRedisConformance(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	redisVariants(t, func(t *testing.T, v redisstore.Options) {
		admissiontest.Run(t, func(t *testing.T) admission.Store {
			// A prefix per test gives each a fresh, empty store on the one server.
			opts := v
			opts.KeyPrefix = fmt.Sprintf("conf%d", n.Add(1))
			s, _ := redisTestStore(t, srv.Addr, opts, nil)
			return s
		})
	})
}

// redisVariants runs a test with group admission (the default), with group admission over
// go-redis's auto-pipeliner, and with one script call per Admit (AdmitBatch 1): how commands
// travel and are grouped must not change what they do.
func redisVariants(t *testing.T, test func(t *testing.T, v redisstore.Options)) {
	t.Run("grouped", func(t *testing.T) { test(t, redisstore.Options{}) })
	t.Run("grouped_autopipeline", func(t *testing.T) { test(t, redisstore.Options{AutoPipeline: true}) })
	t.Run("single", func(t *testing.T) { test(t, redisstore.Options{AdmitBatch: 1}) })
}

// redisTestStore returns a store on its own client and a second, raw client for inspecting the
// server. tune adjusts the store's client options.
func redisTestStore(t testing.TB, addr string, opts redisstore.Options, tune func(*redis.Options)) (*redisstore.Store, *redis.Client) {
	t.Helper()
	o := &redis.Options{Addr: addr, MaxRetries: 3, DialTimeout: time.Second}
	if tune != nil {
		tune(o)
	}
	s, err := redisstore.New(redis.NewClient(o), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	raw := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = raw.Close() })
	return s, raw
}

// redisOpen is an activity whose window is open now.
func redisOpen(id string, stock, limit int64) admission.Activity {
	now := time.Now()
	return admission.Activity{ID: id, Stock: stock, Limit: limit, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}
}

func redisDefine(t testing.TB, s admission.Store, a admission.Activity) admission.Activity {
	t.Helper()
	got, err := s.Define(context.Background(), a, false)
	if err != nil {
		t.Fatalf("define %s: %v", a.ID, err)
	}
	return got
}

func redisAdmit(t testing.TB, s admission.Store, act, user, req string) admission.Decision {
	t.Helper()
	d, err := s.Admit(context.Background(), admission.Request{Activity: act, User: user, Qty: 1, RequestID: req})
	if err != nil {
		t.Fatalf("admit %s %s %s: %v", act, user, req, err)
	}
	return d
}

func redisInt(t testing.TB, raw *redis.Client, key string) int64 {
	t.Helper()
	n, err := raw.Get(context.Background(), key).Int64()
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return n
}

// redisHeld is the items user holds of activity act (prefix seckill) on the server behind c: the
// count at the head of the user's :users field, 0 without one.
func redisHeld(t testing.TB, c *redis.Client, act, user string) int64 {
	t.Helper()
	v, err := c.HGet(context.Background(), "seckill:{"+act+"}:users", user).Result()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	var n int64
	if err == nil {
		_, err = fmt.Sscan(v, &n)
	}
	if err != nil {
		t.Fatalf("users field of %s in %s: %q, %v", user, act, v, err)
	}
	return n
}

// redisStreamWins reads the wins stream of activity act (prefix seckill) on the server behind c
// as it is stored: the id of every win ("<entry id>-k" for the k-th pair of user and "<qty>
// <request id>" after an entry's at and left), in order. The entries are read raw: go-redis's
// XMessage keeps fields in a map, which loses a user named twice in one entry.
func redisStreamWins(t testing.TB, c *redis.Client, act string) []string {
	t.Helper()
	reply, err := c.Do(context.Background(), "XRANGE", "seckill:{"+act+"}:orders", "-", "+").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var wins []string
	for _, e := range reply {
		x, _ := e.([]any)
		if len(x) != 2 {
			t.Fatalf("XRANGE entry %v", e)
		}
		id, _ := x[0].(string)
		f, _ := x[1].([]any)
		if len(f) < 6 || len(f)%2 != 0 || f[0] != "at" || f[2] != "left" {
			t.Fatalf("entry %s: %v, want at, left and wins", id, f)
		}
		for k := 1; k <= (len(f)-4)/2; k++ {
			wins = append(wins, fmt.Sprintf("%s-%d", id, k))
		}
	}
	return wins
}

// TestRedisSmoke walks one sale through admit, replay, release and the queue, checking what lands
// in Redis at each step.
func TestRedisSmoke(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	redisDefine(t, s, redisOpen("phone-1001", 2, 1))

	restocks, err := s.Restocks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	won := redisAdmit(t, s, "phone-1001", "alice", "r1")
	if won.Outcome != admission.Won || won.Remaining != 1 || won.ReservationID == "" || won.Replayed {
		t.Fatalf("first admit = %+v", won)
	}
	if again := redisAdmit(t, s, "phone-1001", "alice", "r1"); again != (admission.Decision{Outcome: admission.Won, ReservationID: won.ReservationID, Remaining: 1, Replayed: true, Qty: 1}) {
		t.Errorf("replay = %+v", again)
	}
	if d := redisAdmit(t, s, "phone-1001", "alice", "r2"); d.Outcome != admission.LimitReached {
		t.Errorf("second buy of alice = %+v", d)
	}
	if d := redisAdmit(t, s, "phone-1001", "bob", "r1"); d.Outcome != admission.Won || d.Remaining != 0 {
		t.Errorf("bob = %+v", d)
	}
	if d := redisAdmit(t, s, "phone-1001", "carol", "r1"); d.Outcome != admission.SoldOut || d.Remaining != 0 {
		t.Errorf("carol = %+v", d)
	}
	if got := redisInt(t, raw, "seckill:{phone-1001}:stock"); got != 0 {
		t.Errorf("stock key = %d", got)
	}

	// The win is in the stream, with the fields the order consumer needs.
	if err := s.EnsureGroup(ctx, "phone-1001", "orders"); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ReadGroup(ctx, "phone-1001", "orders", "c1", 10, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ReservationID != won.ReservationID || ws[0].User != "alice" || ws[0].RequestID != "r1" ||
		ws[0].Qty != 1 || ws[0].Deliveries != 1 || time.Since(ws[0].At) > time.Minute {
		t.Fatalf("read = %+v", ws)
	}
	if err := s.Ack(ctx, "phone-1001", "orders", ws[0].ID, ws[1].ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := raw.XPending(ctx, "seckill:{phone-1001}:orders", "orders").Result(); n.Count != 0 {
		t.Errorf("pending after ack = %d", n.Count)
	}

	// Release: exactly once, announced, and alice may buy again.
	for i, want := range []bool{true, false} {
		ok, err := s.Release(ctx, "phone-1001", won.ReservationID)
		if err != nil || ok != want {
			t.Fatalf("release #%d = %v, %v; want %v", i+1, ok, err, want)
		}
	}
	select {
	case id := <-restocks:
		if id != "phone-1001" {
			t.Errorf("restock %q", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no restock message")
	}
	if n := redisHeld(t, raw, "phone-1001", "alice"); n != 0 {
		t.Errorf("alice still holds %d after release", n)
	}
	if d := redisAdmit(t, s, "phone-1001", "alice", "r3"); d.Outcome != admission.Won {
		t.Errorf("alice after release = %+v", d)
	}
	if _, err := s.Release(ctx, "phone-1001", "1-1"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("release of an unknown reservation: %v", err)
	}

	snap, err := s.Activity(ctx, "phone-1001")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Remaining != 0 || snap.Sold != 2 || snap.Buyers != 2 || snap.Queued != 3 || snap.Dead != 0 {
		t.Errorf("snapshot = %+v", snap)
	}
	if r, err := s.GetResult(ctx, "phone-1001", "alice"); err != nil || r.Code != "queued" || r.ReservationID == won.ReservationID {
		t.Errorf("alice's result = %+v, %v; want her second reservation", r, err)
	}
}

// TestRedisBadInputSendsNothing checks that Go-side validation rejects before any command and that
// the script's own qty check (which needs the stored limit) writes nothing.
func TestRedisBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	redisDefine(t, s, redisOpen("a1", 10, 2))
	before := redisCommands(t, raw)
	bad := []admission.Request{
		{Activity: "a1", User: "", Qty: 1, RequestID: "r"},
		{Activity: "a1", User: "u", Qty: 0, RequestID: "r"},
		{Activity: "a}1", User: "u", Qty: 1, RequestID: "r"},
		{Activity: "a1", User: "u", Qty: 1, RequestID: ""},
	}
	for _, r := range bad {
		if _, err := s.Admit(ctx, r); !errors.Is(err, admission.ErrBadInput) {
			t.Errorf("admit %+v: %v", r, err)
		}
	}
	if _, err := s.Release(ctx, "a1", ""); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("release with empty id: %v", err)
	}
	if _, err := s.Define(ctx, admission.Activity{ID: "x"}, false); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("define empty: %v", err)
	}
	// The INFO call of redisCommands itself is the only command in between.
	if after := redisCommands(t, raw); after != before+1 {
		t.Errorf("bad input sent %d commands", after-before-1)
	}

	_, err := s.Admit(ctx, admission.Request{Activity: "a1", User: "u", Qty: 3, RequestID: "r"})
	if !errors.Is(err, admission.ErrBadInput) || !strings.Contains(err.Error(), "admit a1") {
		t.Errorf("qty above limit: %v", err)
	}
	keys, _ := raw.Keys(ctx, "seckill:{a1}:*").Result()
	slices.Sort(keys)
	if fmt.Sprint(keys) != "[seckill:{a1}:meta seckill:{a1}:stock]" {
		t.Errorf("rejected admission wrote keys: %v", keys)
	}
	if _, err := redisstore.New(redis.NewClient(&redis.Options{Addr: srv.Addr}), redisstore.Options{KeyPrefix: "a{b}"}); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("prefix with braces: %v", err)
	}
}

// redisCommands returns the number of commands the server has processed.
func redisCommands(t testing.TB, raw *redis.Client) int64 {
	t.Helper()
	info, err := raw.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// TestRedisKeys checks the exact key names and that every activity key carries the hash tag, so
// each script touches a single Cluster slot.
func TestRedisKeys(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	redisDefine(t, s, redisOpen("phone-1001", 5, 1))
	d := redisAdmit(t, s, "phone-1001", "u1", "r1")
	if _, err := s.Release(ctx, "phone-1001", d.ReservationID); err != nil {
		t.Fatal(err)
	}
	d2 := redisAdmit(t, s, "phone-1001", "u2", "r1")
	if err := s.EnsureGroup(ctx, "phone-1001", "g"); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ReadGroup(ctx, "phone-1001", "g", "c", 1, 0, false)
	if err != nil || len(ws) != 1 {
		t.Fatalf("read = %v, %v", ws, err)
	}
	if err := s.DeadLetter(ctx, "phone-1001", "g", ws[0], "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetResult(ctx, "phone-1001", "u2", admission.Result{Code: "pending_payment", ReservationID: d2.ReservationID, OrderID: "o2"}); err != nil {
		t.Fatal(err)
	}

	keys, err := raw.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	want := []string{"seckill:activities"}
	for _, k := range []string{"acked", "dead", "meta", "orders", "released", "results", "stock", "users"} {
		want = append(want, "seckill:{phone-1001}:"+k)
	}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("keys =\n%v\nwant\n%v", keys, want)
	}
	for _, k := range keys {
		if k != "seckill:activities" && !strings.HasPrefix(k, "seckill:{phone-1001}:") {
			t.Errorf("key %s lacks the hash tag", k)
		}
	}
	for k, typ := range map[string]string{"meta": "hash", "stock": "string", "users": "hash", "acked": "hash",
		"orders": "stream", "dead": "stream", "released": "hash", "results": "hash"} {
		if got := raw.Type(ctx, "seckill:{phone-1001}:"+k).Val(); got != typ {
			t.Errorf("%s is a %s, want %s", k, got, typ)
		}
	}
	meta := raw.HGetAll(ctx, "seckill:{phone-1001}:meta").Val()
	for _, f := range []string{"stock_total", "limit", "start_ms", "end_ms", "pay_ms", "salt", "layout", "wins", "buyers"} {
		if meta[f] == "" {
			t.Errorf("meta lacks %s: %v", f, meta)
		}
	}
	if meta["layout"] != "2" {
		t.Errorf("meta layout = %q, want 2", meta["layout"])
	}
	if got := raw.HGet(ctx, "seckill:{phone-1001}:users", "u2").Val(); got != "1 1\n2:r1"+d2.ReservationID+";" {
		t.Errorf("users[u2] = %q, want 1 held, 1 folded (SetResult wrote its queued record), and the first answer of r1, %s", got, d2.ReservationID)
	}

	// Delete removes them all, the listing included.
	if err := s.Delete(ctx, "phone-1001", true); err != nil {
		t.Fatal(err)
	}
	if keys := raw.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Errorf("keys left after delete: %v", keys)
	}

	// Another prefix keeps its keys apart.
	s2, _ := redisTestStore(t, srv.Addr, redisstore.Options{KeyPrefix: "shop2"}, nil)
	redisDefine(t, s2, redisOpen("x", 1, 1))
	if got := raw.Exists(ctx, "shop2:{x}:stock", "shop2:activities").Val(); got != 2 {
		t.Errorf("prefixed keys missing (%d of 2)", got)
	}
}

// TestRedisDroppedReply loses the server's reply after a script ran: go-redis retries on a new
// connection, and the retry must get the first answer instead of acting twice.
func TestRedisDroppedReply(t *testing.T) { redisVariants(t, testRedisDroppedReply) }

func testRedisDroppedReply(t *testing.T, v redisstore.Options) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	proxy := testsrv.StartProxy(t, srv.Addr)
	s, raw := redisTestStore(t, proxy.Addr, v, func(o *redis.Options) {
		o.PoolSize = 1 // one connection, so the armed drop hits the next command's reply
		o.MaxRetries = 3
	})
	redisDefine(t, s, redisOpen("a1", 10, 1))
	// Load the scripts first: the drop must hit the script's answer, not a NOSCRIPT reply.
	redisAdmit(t, s, "a1", "warm-up", "r")
	if _, err := s.Release(ctx, "a1", "0-1"); !errors.Is(err, admission.ErrNotFound) {
		t.Fatalf("warm-up release: %v", err)
	}

	proxy.DropNextReply()
	d, err := s.Admit(ctx, admission.Request{Activity: "a1", User: "u1", Qty: 1, RequestID: "r1"})
	if err != nil {
		t.Fatalf("admit through a dropped reply: %v", err)
	}
	if proxy.Drops() != 1 {
		t.Fatalf("the proxy dropped %d replies, want 1", proxy.Drops())
	}
	if d.Outcome != admission.Won || !d.Replayed || d.Remaining != 8 || d.ReservationID == "" {
		t.Errorf("decision = %+v, want the first answer, replayed", d)
	}
	if n := redisInt(t, raw, "seckill:{a1}:stock"); n != 8 {
		t.Errorf("stock = %d, want 8: the retry must not take a second item", n)
	}
	if wins := redisStreamWins(t, raw, "a1"); len(wins) != 2 || wins[1] != d.ReservationID {
		t.Errorf("wins in the stream = %q, want the warm-up and exactly one win %s", wins, d.ReservationID)
	}

	// The same for a release: the releasing call learns that it released, and only once.
	proxy.DropNextReply()
	ok, err := s.Release(ctx, "a1", d.ReservationID)
	if err != nil || !ok {
		t.Fatalf("release through a dropped reply = %v, %v; want true", ok, err)
	}
	if proxy.Drops() != 2 {
		t.Fatalf("the proxy dropped %d replies, want 2", proxy.Drops())
	}
	if n := redisInt(t, raw, "seckill:{a1}:stock"); n != 9 {
		t.Errorf("stock = %d, want 9", n)
	}
	if ok, err := s.Release(ctx, "a1", d.ReservationID); err != nil || ok {
		t.Errorf("second release = %v, %v; want false", ok, err)
	}
}

// TestRedisConcurrentRelease releases one reservation from ten clients at once.
func TestRedisConcurrentRelease(t *testing.T) { redisVariants(t, testRedisConcurrentRelease) }

func testRedisConcurrentRelease(t *testing.T, v redisstore.Options) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, v, nil)
	redisDefine(t, s, redisOpen("a1", 1, 1))
	won := redisAdmit(t, s, "a1", "u1", "r1")
	if won.Outcome != admission.Won {
		t.Fatalf("admit = %+v", won)
	}
	stores := make([]*redisstore.Store, 10)
	for i := range stores {
		stores[i], _ = redisTestStore(t, srv.Addr, v, nil)
	}
	var (
		wg       sync.WaitGroup
		released atomic.Int64
		start    = make(chan struct{})
	)
	for _, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ok, err := st.Release(ctx, "a1", won.ReservationID)
			if err != nil {
				t.Errorf("release: %v", err)
			}
			if ok {
				released.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if released.Load() != 1 {
		t.Errorf("%d calls reported the release, want 1", released.Load())
	}
	if n := redisInt(t, raw, "seckill:{a1}:stock"); n != 1 {
		t.Errorf("stock = %d, want 1", n)
	}
	if d := redisAdmit(t, s, "a1", "u1", "r2"); d.Outcome != admission.Won {
		t.Errorf("buy again after release = %+v", d)
	}
}

// TestRedisScriptFlush empties the server's script cache between calls: EVALSHA fails with
// NOSCRIPT and the client falls back to EVAL, unseen by callers.
func TestRedisScriptFlush(t *testing.T) { redisVariants(t, testRedisScriptFlush) }

func testRedisScriptFlush(t *testing.T, v redisstore.Options) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, v, nil)
	flush := func() {
		t.Helper()
		if err := raw.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if n := redisScriptCount(t, raw); n != 0 {
			t.Fatalf("%d scripts cached after SCRIPT FLUSH", n)
		}
	}
	redisDefine(t, s, redisOpen("a1", 10, 1))
	flush()
	d := redisAdmit(t, s, "a1", "u1", "r1")
	if d.Outcome != admission.Won {
		t.Fatalf("admit after flush = %+v", d)
	}
	if redisScriptCount(t, raw) == 0 {
		t.Error("admit ran without loading its script: the flush was not exercised")
	}
	flush()
	if ok, err := s.Release(ctx, "a1", d.ReservationID); err != nil || !ok {
		t.Fatalf("release after flush = %v, %v", ok, err)
	}
	flush()
	if d := redisAdmit(t, s, "a1", "u1", "r2"); d.Outcome != admission.Won || d.Remaining != 9 {
		t.Errorf("admit after second flush = %+v", d)
	}
}

// redisScriptCount counts the scripts in the server's cache.
func redisScriptCount(t testing.TB, raw *redis.Client) int64 {
	t.Helper()
	info, err := raw.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "number_of_cached_scripts:"); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no number_of_cached_scripts in INFO")
	return 0
}

// TestRedisKilledServer kills redis-server (SIGKILL) while 50 goroutines admit. Callers see errors,
// never a win that was not stored: with appendfsync always every win reported to a caller is in
// the stream after the restart, and the store works again.
func TestRedisKilledServer(t *testing.T) { redisVariants(t, testRedisKilledServer) }

func testRedisKilledServer(t *testing.T, v redisstore.Options) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t, testsrv.WithAOF("always"))
	// go-redis logs every failed dial of the outage to stderr; keep the test output readable.
	redis.SetLogger(redisQuietLogger{})
	t.Cleanup(func() { redis.SetLogger(redisStderrLogger{log.New(os.Stderr, "redis: ", log.LstdFlags)}) })
	s, raw := redisTestStore(t, srv.Addr, v, func(o *redis.Options) {
		o.PoolSize = 64
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = 2 * time.Second
		o.MaxRetryBackoff = 50 * time.Millisecond
	})
	redisDefine(t, s, redisOpen("a1", 1_000_000, 1))

	var (
		mu       sync.Mutex
		wins     = map[string]bool{}
		winCount atomic.Int64
		errCount atomic.Int64
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	for g := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				user := fmt.Sprintf("g%d-u%d", g, i)
				d, err := s.Admit(ctx, admission.Request{Activity: "a1", User: user, Qty: 1, RequestID: "r"})
				if err != nil {
					errCount.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if d.Outcome != admission.Won {
					t.Errorf("%s: %+v", user, d)
					return
				}
				mu.Lock()
				wins[d.ReservationID] = true
				mu.Unlock()
				winCount.Add(1)
			}
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				wg.Wait()
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("wins before the kill", func() bool { return winCount.Load() >= 200 })
	srv.Kill()
	waitFor("errors after the kill", func() bool { return errCount.Load() >= 50 })
	beforeRestart := winCount.Load()
	srv.Restart()
	waitFor("wins after the restart", func() bool { return winCount.Load() >= beforeRestart+200 })
	close(stop)
	wg.Wait()

	ids := redisStreamWins(t, raw, "a1")
	stored := make(map[string]bool, len(ids))
	for _, id := range ids {
		stored[id] = true
	}
	missing := 0
	for id := range wins {
		if !stored[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d reported wins are missing from the stream after the crash", missing, len(wins))
	}
	// The stream, the stock, the buyers and the counters agree: every script ran whole or not at
	// all.
	left := redisInt(t, raw, "seckill:{a1}:stock")
	buyers := raw.HLen(ctx, "seckill:{a1}:users").Val()
	counted := raw.HMGet(ctx, "seckill:{a1}:meta", "wins", "buyers").Val()
	if sold := 1_000_000 - left; sold != int64(len(ids)) || buyers != sold || fmt.Sprint(counted) != fmt.Sprint([]any{fmt.Sprint(sold), fmt.Sprint(sold)}) {
		t.Errorf("sold %d, stream %d, buyers %d, counted wins and buyers %v: they must agree", sold, len(ids), buyers, counted)
	}
	if int64(len(ids)) < int64(len(wins)) {
		t.Errorf("stream %d < reported wins %d", len(ids), len(wins))
	}
	t.Logf("%d wins reported, %d in the stream, %d errors during the outage", len(wins), len(ids), errCount.Load())
}

type redisQuietLogger struct{}

func (redisQuietLogger) Printf(context.Context, string, ...any) {}

type redisStderrLogger struct{ l *log.Logger }

func (l redisStderrLogger) Printf(_ context.Context, format string, v ...any) {
	l.l.Printf(format, v...)
}

// TestRedisClaimAndDeadLetter follows an entry whose consumer died: claimed by another consumer
// once idle, delivery counts rising, then dead-lettered and acknowledged in one step.
func TestRedisClaimAndDeadLetter(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	redisDefine(t, s, redisOpen("a1", 10, 1))
	won := redisAdmit(t, s, "a1", "u1", "r1")
	if err := s.EnsureGroup(ctx, "a1", "g"); err != nil {
		t.Fatal(err)
	}
	ws, err := s.ReadGroup(ctx, "a1", "g", "dead-consumer", 10, 0, false)
	if err != nil || len(ws) != 1 || ws[0].Deliveries != 1 {
		t.Fatalf("read = %+v, %v", ws, err)
	}
	if got, err := s.Claim(ctx, "a1", "g", "c2", time.Hour, 10); err != nil || len(got) != 0 {
		t.Fatalf("claim of a fresh entry = %+v, %v; want nothing", got, err)
	}
	var last admission.Win
	for want := int64(2); want <= 3; want++ {
		time.Sleep(30 * time.Millisecond)
		got, err := s.Claim(ctx, "a1", "g", fmt.Sprintf("c%d", want), 20*time.Millisecond, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ID != won.ReservationID || got[0].Deliveries != want || got[0].User != "u1" {
			t.Fatalf("claim #%d = %+v, want the entry with %d deliveries", want-1, got, want)
		}
		last = got[0]
	}
	pend, err := s.ReadGroup(ctx, "a1", "g", "c3", 10, 0, true)
	if err != nil || len(pend) != 1 || pend[0].Deliveries != 4 {
		t.Fatalf("pending read of c3 = %+v, %v; want 4 deliveries", pend, err)
	}
	ext := raw.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "seckill:{a1}:orders", Group: "g", Start: "-", End: "+", Count: 10}).Val()
	if len(ext) != 1 || ext[0].RetryCount != 4 || ext[0].Consumer != "c3" {
		t.Fatalf("XPENDING = %+v", ext)
	}

	if err := s.DeadLetter(ctx, "a1", "g", last, "poison"); err != nil {
		t.Fatal(err)
	}
	if n := raw.XPending(ctx, "seckill:{a1}:orders", "g").Val(); n.Count != 0 {
		t.Errorf("%d entries pending after the dead letter", n.Count)
	}
	if err := s.DeadLetter(ctx, "a1", "g", last, "again"); err != nil {
		t.Errorf("repeated dead letter: %v", err)
	}
	dead, err := s.DeadLetters(ctx, "a1", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != won.ReservationID || dead[0].ReservationID != won.ReservationID ||
		dead[0].Reason != "poison" || dead[0].Deliveries != 4 || dead[0].User != "u1" || dead[0].RequestID != "r1" {
		t.Errorf("dead letters = %+v", dead)
	}
	if err := s.DeadLetter(ctx, "a1", "g", admission.Win{ID: "1-1"}, "x"); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("dead letter of a missing entry: %v", err)
	}
	if _, err := s.ReadGroup(ctx, "a1", "nogroup", "c", 1, 0, false); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("read of a missing group: %v", err)
	}
	if _, err := s.ReadGroup(ctx, "nope", "g", "c", 1, 0, true); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("pending read of an unknown activity: %v", err)
	}
	if err := s.EnsureGroup(ctx, "nope", "g"); !errors.Is(err, admission.ErrUnknownActivity) {
		t.Errorf("ensure group of an unknown activity: %v", err)
	}
	if raw.Exists(ctx, "seckill:{nope}:orders").Val() != 0 {
		t.Error("ensure group created a stream for an unknown activity")
	}
}

// TestRedisNoOversell is the classic rush against a real server: 1,000 buyers, 5 presses each,
// 100 items, limit 1.
func TestRedisNoOversell(t *testing.T) { redisVariants(t, testRedisNoOversell) }

func testRedisNoOversell(t *testing.T, v redisstore.Options) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, v, func(o *redis.Options) {
		o.PoolSize = 64
		o.PoolTimeout = 30 * time.Second
	})
	redisDefine(t, s, redisOpen("rush", 100, 1))
	var (
		mu      sync.Mutex
		winners = map[string]int{}
		wg      sync.WaitGroup
	)
	for u := range 1000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := fmt.Sprintf("user-%d", u)
			for a := range 5 {
				d, err := s.Admit(ctx, admission.Request{Activity: "rush", User: user, Qty: 1, RequestID: fmt.Sprint(a)})
				if err != nil {
					t.Errorf("admit: %v", err)
					return
				}
				if d.Outcome == admission.Won {
					mu.Lock()
					winners[user]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	wins := 0
	for user, n := range winners {
		wins += n
		if n != 1 {
			t.Errorf("%s won %d times", user, n)
		}
	}
	if wins != 100 || len(winners) != 100 {
		t.Errorf("%d wins by %d users, want 100 by 100", wins, len(winners))
	}
	if n := redisInt(t, raw, "seckill:{rush}:stock"); n != 0 {
		t.Errorf("stock = %d, want 0", n)
	}
	if n := len(redisStreamWins(t, raw, "rush")); n != 100 {
		t.Errorf("stream holds %d wins, want 100", n)
	}
}

// TestRedisDefine covers what the conformance suite cannot see: the salt is drawn on creation and
// kept on redefinition, and the running check uses the server's clock.
func TestRedisDefine(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	up := redisOpen("a1", 10, 1)
	up.Start, up.End = time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)
	first := redisDefine(t, s, up)
	if len(first.Salt) != 32 || raw.HGet(ctx, "seckill:{a1}:meta", "salt").Val() != first.Salt {
		t.Fatalf("salt %q not generated and stored", first.Salt)
	}
	up.Limit = 2
	second := redisDefine(t, s, up)
	if second.Salt != first.Salt || second.Limit != 2 {
		t.Errorf("redefinition = %+v, want the old salt and limit 2", second)
	}
	up.Salt = "explicit"
	if got := redisDefine(t, s, up); got.Salt != "explicit" {
		t.Errorf("explicit salt not stored: %+v", got)
	}
	// Move the stored start into the past behind the store's back: the script must read the
	// server's clock and the stored window, not trust the caller.
	raw.HSet(ctx, "seckill:{a1}:meta", "start_ms", time.Now().Add(-time.Minute).UnixMilli())
	up.Stock = 11
	if _, err := s.Define(ctx, up, false); !errors.Is(err, admission.ErrActivityRunning) {
		t.Errorf("redefine after the stored start: %v", err)
	}
}

// TestRedisLargeNumbers checks that the scripts keep counts up to 2^53 exact (Lua numbers are
// doubles, and a careless concatenation prints them in exponent form) and refuse larger ones.
func TestRedisLargeNumbers(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	const big = 1<<53 - 1
	redisDefine(t, s, redisOpen("big", big, big))
	first, err := s.Admit(ctx, admission.Request{Activity: "big", User: "u", Qty: 1 << 40, RequestID: "r"})
	if err != nil || first.Outcome != admission.Won || first.Remaining != big-1<<40 {
		t.Fatalf("admit = %+v, %v", first, err)
	}
	again, err := s.Admit(ctx, admission.Request{Activity: "big", User: "u", Qty: 1 << 40, RequestID: "r"})
	if err != nil || !again.Replayed || again.Remaining != first.Remaining || again.ReservationID != first.ReservationID {
		t.Errorf("replay = %+v, %v; want %+v replayed", again, err, first)
	}
	if ok, err := s.Release(ctx, "big", first.ReservationID); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if n, _ := s.Remaining(ctx, "big"); n != big {
		t.Errorf("remaining after release = %d, want %d", n, int64(big))
	}
	if _, err := s.Define(ctx, redisOpen("huge", 1<<53+1, 1), false); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("stock above 2^53: %v", err)
	}
}

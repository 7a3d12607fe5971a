package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// The wins queue (docs/admission.md, "The wins queue"): one stream entry per admission call, the
// k-th win of entry E being "E-k". The entries are made by the store's own admission call
// (runAdmitBatch, the script call a group of concurrent Admits shares), given the requests of each
// call, so that a test knows which wins share an entry.

// redisTestActivity is an open activity.
func redisTestActivity(id string, stock, limit int64) admission.Activity {
	now := time.Now()
	return admission.Activity{ID: id, Stock: stock, Limit: limit, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}
}

// winsQueue drives one activity's admissions and wins queue on one store.
type winsQueue struct {
	s   *Store
	raw redis.UniversalClient
	act string
}

func newWinsQueue(t testing.TB, s *Store, raw redis.UniversalClient, act string, stock, limit int64, buckets int) *winsQueue {
	t.Helper()
	a := redisTestActivity(act, stock, limit)
	a.Buckets = buckets
	if _, err := s.Define(context.Background(), a, false); err != nil {
		t.Fatal(err)
	}
	return &winsQueue{s: s, raw: raw, act: act}
}

// call admits (user, qty, request id) triples in one script call on key set on (the activity or
// a bucket) and returns the stream entry it appended, requiring every request won anew.
func (q *winsQueue) call(t testing.TB, on string, reqs ...string) string {
	t.Helper()
	calls := make([]*admitCall, 0, len(reqs)/3)
	for i := 0; i+2 < len(reqs); i += 3 {
		qty, err := strconv.ParseInt(reqs[i+1], 10, 64)
		r := admission.Request{Activity: q.act, User: reqs[i], Qty: qty, RequestID: reqs[i+2]}
		if err == nil {
			err = r.Validate()
		}
		if err != nil {
			t.Fatalf("request %q: %v", reqs[i:i+3], err)
		}
		r.Activity = on
		calls = append(calls, &admitCall{req: r, done: make(chan struct{}, 1)})
	}
	q.s.runAdmitBatches(context.Background(), []admitBatch{{activity: on, calls: calls}})
	entry := ""
	for i, c := range calls {
		<-c.done
		d, err := c.answer.d, c.answer.err
		if err != nil || d.Outcome != admission.Won || d.Replayed {
			t.Fatalf("admit %q: request %d answered %+v, %v; want a new win", reqs, i, d, err)
		}
		e := d.ReservationID[:strings.LastIndexByte(d.ReservationID, '-')]
		if entry != "" && e != entry {
			t.Fatalf("admit %q: wins in entries %s and %s", reqs, entry, e)
		}
		entry = e
	}
	return entry
}

func (q *winsQueue) backlog(t testing.TB, group string, want int64, when string) {
	t.Helper()
	n, err := q.s.Backlog(context.Background(), q.act, group)
	if err != nil || n != want {
		t.Fatalf("%s: backlog %s = %d, %v; want %d", when, group, n, err, want)
	}
}

// pending returns the entries of on's stream pending in group.
func (q *winsQueue) pending(t testing.TB, on, group string) []string {
	t.Helper()
	ps, err := q.raw.XPendingExt(context.Background(), &redis.XPendingExtArgs{
		Stream: q.s.key(on, "orders"), Group: group, Start: "-", End: "+", Count: 1000,
	}).Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ps))
	for i, p := range ps {
		ids[i] = p.ID
	}
	return ids
}

// winKey is what identifies a delivered win here.
func winKey(w admission.Win) string {
	return fmt.Sprintf("%s %s %d %s d%d", w.ID, w.User, w.Qty, w.RequestID, w.Deliveries)
}

func winKeys(ws []admission.Win) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = winKey(w)
	}
	return out
}

func wantWins(t testing.TB, what string, ws []admission.Win, err error, want ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got := winKeys(ws); !slices.Equal(got, want) {
		t.Fatalf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// TestRedisQueue splits entries into wins and acknowledges them one by one, on
// a single server, on one with a replica and ReplicasAck (the reads' WAIT), and on the 3+3
// Cluster: multi-win entries, a user with two wins in one entry, reads bounded in wins, a
// partial ack, a pending re-read and a claim that leave the acknowledged wins out, acks twice,
// a dead letter of one win, and the backlog in wins, exact at every step.
func TestRedisQueue(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		srv := testsrv.StartRedis(t)
		s, raw := queueStore(t, &redis.Options{Addr: srv.Addr}, Options{})
		testQueue(t, s, raw)
	})
	t.Run("replicas_ack", func(t *testing.T) {
		master := testsrv.StartRedis(t)
		testsrv.StartReplica(t, master)
		s, raw := queueStore(t, &redis.Options{Addr: master.Addr}, Options{ReplicasAck: 1, ReplicasAckTimeout: 5 * time.Second})
		testQueue(t, s, raw)
	})
	t.Run("cluster", func(t *testing.T) {
		cluster := testsrv.StartCluster(t)
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs(), MaxRetries: 3})
		s, err := New(c, Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		testQueue(t, s, c)
	})
}

// queueStore is a store on its own client, and a raw client.
func queueStore(t testing.TB, o *redis.Options, opts Options) (*Store, *redis.Client) {
	t.Helper()
	s, err := New(redis.NewClient(o), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	raw := redis.NewClient(&redis.Options{Addr: o.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	return s, raw
}

func testQueue(t *testing.T, s *Store, raw redis.UniversalClient) {
	ctx := context.Background()
	q := newWinsQueue(t, s, raw, "wq", 100, 3, 0)
	if err := s.EnsureGroup(ctx, "wq", "g"); err != nil {
		t.Fatal(err)
	}
	q.backlog(t, "g", 0, "no wins")
	// Request ids with the pair's separator (a space) and the :users field's.
	e1 := q.call(t, "wq", "u1", "1", "r 1", "u2", "2", "r2", "u3", "1", "r;3:\n")
	e2 := q.call(t, "wq", "u6", "1", "r6a", "u6", "1", "r6b") // one user, two wins, one entry
	e3 := q.call(t, "wq", "u4", "1", "r4")
	e4 := q.call(t, "wq", "u5", "1", "r5", "u7", "1", "r7")
	q.backlog(t, "g", 8, "8 wins, none read")

	// A read of 4 wins takes e1 (3) and, still short, e2 whole (2): entries are not split.
	ws, err := s.ReadGroup(ctx, "wq", "g", "c1", 4, 0, false)
	wantWins(t, "read of 4", ws, err,
		e1+"-1 u1 1 r 1 d1", e1+"-2 u2 2 r2 d1", e1+"-3 u3 1 r;3:\n d1", e2+"-1 u6 1 r6a d1", e2+"-2 u6 1 r6b d1")
	for _, w := range ws {
		if w.ReservationID != w.ID || w.Activity != "wq" || time.Since(w.At) > time.Minute || w.At.After(time.Now()) {
			t.Fatalf("win %+v: reservation id, activity or admission time wrong", w)
		}
	}
	// A read of 1 win takes one entry whole, here e3 (1).
	ws, err = s.ReadGroup(ctx, "wq", "g", "c1", 1, 0, false)
	wantWins(t, "read of 1", ws, err, e3+"-1 u4 1 r4 d1")
	q.backlog(t, "g", 8, "6 wins delivered, none acknowledged")

	// Partial ack of e1, twice; e2 whole; an unknown win, numbers beyond the entry's wins, and
	// e1's entry id itself, which names no win (XACK of it would acknowledge all of e1).
	for range 2 {
		if err := s.Ack(ctx, "wq", "g", e1+"-2", e2+"-1", e2+"-2", e1+"-4", e1+"-0", "1-1-1", e1); err != nil {
			t.Fatal(err)
		}
	}
	q.backlog(t, "g", 5, "e1-2 and e2 acknowledged")
	if p := q.pending(t, "wq", "g"); !slices.Equal(p, []string{e1, e3}) {
		t.Fatalf("pending entries %v, want e1 and e3 (e2 done)", p)
	}

	// c1's pending re-read leaves e1-2 out (a delivery more for e1 and e3).
	ws, err = s.ReadGroup(ctx, "wq", "g", "c1", 10, 0, true)
	wantWins(t, "pending re-read", ws, err, e1+"-1 u1 1 r 1 d2", e1+"-3 u3 1 r;3:\n d2", e3+"-1 u4 1 r4 d2")
	// Pending reads count unacknowledged wins: 2 from e1 reach 2.
	ws, err = s.ReadGroup(ctx, "wq", "g", "c1", 2, 0, true)
	wantWins(t, "pending re-read of 2", ws, err, e1+"-1 u1 1 r 1 d3", e1+"-3 u3 1 r;3:\n d3")

	// c1 dies; c2 claims e1 (2 unacknowledged wins reach a count of 2) and then e3.
	ws, err = s.Claim(ctx, "wq", "g", "c2", 0, 2)
	wantWins(t, "claim of 2", ws, err, e1+"-1 u1 1 r 1 d4", e1+"-3 u3 1 r;3:\n d4")
	ws, err = s.Claim(ctx, "wq", "g", "c2", 0, 10)
	wantWins(t, "claim of the rest", ws, err, e1+"-1 u1 1 r 1 d5", e1+"-3 u3 1 r;3:\n d5", e3+"-1 u4 1 r4 d3")

	// A dead letter of one win of e1, twice: copied once, acknowledged once; the entry stays.
	w3 := ws[1]
	for range 2 {
		if err := s.DeadLetter(ctx, "wq", "g", w3, "poison: test"); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := s.DeadLetters(ctx, "wq", 10)
	if err != nil || len(dead) != 1 || winKey(dead[0]) != winKey(w3) || dead[0].Reason != "poison: test" ||
		!dead[0].At.Equal(w3.At) || dead[0].ReservationID != w3.ID {
		t.Fatalf("dead letters = %+v, %v; want %+v alone", dead, err, w3)
	}
	q.backlog(t, "g", 4, "e1-3 dead-lettered")
	ws, err = s.ReadGroup(ctx, "wq", "g", "c2", 10, 0, true)
	wantWins(t, "c2's pending after the dead letter", ws, err, e1+"-1 u1 1 r 1 d6", e3+"-1 u4 1 r4 d4")
	// Acknowledging a dead-lettered win counts nothing.
	if err := s.Ack(ctx, "wq", "g", e1+"-3"); err != nil {
		t.Fatal(err)
	}
	q.backlog(t, "g", 4, "a dead-lettered win acknowledged")
	// The last win of e1: the entry leaves the pending list and its :acked field goes.
	if err := s.Ack(ctx, "wq", "g", e1+"-1"); err != nil {
		t.Fatal(err)
	}
	if p := q.pending(t, "wq", "g"); !slices.Equal(p, []string{e3}) {
		t.Fatalf("pending entries %v, want e3", p)
	}
	if n, err := raw.XLen(ctx, s.key("wq", "orders")).Result(); err != nil || n != 4 {
		t.Fatalf("stream length %d, %v; want 4: entries are never deleted", n, err)
	}
	q.backlog(t, "g", 3, "e1 done")
	// A dead letter of a win whose entry is done is left alone.
	if err := s.DeadLetter(ctx, "wq", "g", admission.Win{ID: e1 + "-2"}, "late"); err != nil {
		t.Fatal(err)
	}
	if dead, _ := s.DeadLetters(ctx, "wq", 10); len(dead) != 1 {
		t.Fatalf("%d dead letters after a late one, want 1", len(dead))
	}
	// An entry id names no win: not found, and nothing of e3 is moved or acknowledged.
	if err := s.DeadLetter(ctx, "wq", "g", admission.Win{ID: e3}, "an entry"); !errors.Is(err, admission.ErrNotFound) {
		t.Fatalf("dead letter of the entry id %s: %v, want ErrNotFound", e3, err)
	}
	if p := q.pending(t, "wq", "g"); !slices.Equal(p, []string{e3}) {
		t.Fatalf("pending entries %v, want e3", p)
	}

	// A blocking read is answered by a call made while it waits.
	go func() {
		time.Sleep(100 * time.Millisecond)
		q.call(t, "wq", "u8", "1", "r8")
	}()
	began := time.Now()
	ws, err = s.ReadGroup(ctx, "wq", "g", "c3", 10, 5*time.Second, false)
	// e4 was there before the read: it comes first, without a wait.
	wantWins(t, "read of the rest", ws, err, e4+"-1 u5 1 r5 d1", e4+"-2 u7 1 r7 d1")
	ws, err = s.ReadGroup(ctx, "wq", "g", "c3", 10, 5*time.Second, false)
	if err != nil || len(ws) != 1 || ws[0].User != "u8" || time.Since(began) > 4*time.Second {
		t.Fatalf("blocking read = %+v, %v after %v; want u8's win", ws, err, time.Since(began))
	}
	q.backlog(t, "g", 4, "e3, e4 and u8's win unacknowledged")
	ids := []string{e3 + "-1", e4 + "-1", e4 + "-2", ws[0].ID}
	if err := s.Ack(ctx, "wq", "g", ids...); err != nil {
		t.Fatal(err)
	}
	q.backlog(t, "g", 0, "everything acknowledged")
	if p := q.pending(t, "wq", "g"); len(p) != 0 {
		t.Fatalf("pending entries %v, want none", p)
	}
	// :acked keeps only the group's count once every entry is done.
	if f, err := raw.HGetAll(ctx, s.key("wq", "acked")).Result(); err != nil || len(f) != 1 || f["n g"] != "9" {
		t.Fatalf(":acked = %v, %v; want only n g = 9", f, err)
	}

	// Another group counts on its own, from the start of the stream.
	if err := s.EnsureGroup(ctx, "wq", "g2"); err != nil {
		t.Fatal(err)
	}
	q.backlog(t, "g2", 9, "a new group")
	if _, err := s.Backlog(ctx, "wq", "nosuch"); !errors.Is(err, admission.ErrNotFound) {
		t.Fatalf("backlog of no group: %v, want ErrNotFound", err)
	}
}

// TestRedisQueueBuckets: a split activity's entries, one stream per bucket,
// come out as wins "E-k.<bucket>", which Ack and DeadLetter take back to their bucket; the
// backlog sums the buckets' wins.
func TestRedisQueueBuckets(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := queueStore(t, &redis.Options{Addr: srv.Addr}, Options{})
	q := newWinsQueue(t, s, raw, "b2", 40, 2, 2)
	if err := s.EnsureGroup(ctx, "b2", "g"); err != nil {
		t.Fatal(err)
	}
	b0, b1 := bucketID("b2", 0, 2), bucketID("b2", 1, 2)
	e0 := q.call(t, b0, "u1", "1", "r1", "u2", "1", "r2")
	e1 := q.call(t, b1, "u3", "1", "r3", "u4", "1", "r4", "u5", "1", "r5")
	q.backlog(t, "g", 5, "5 wins in 2 buckets")
	var all []admission.Win
	for len(all) < 5 {
		ws, err := s.ReadGroup(ctx, "b2", "g", "c1", 5, time.Second, false)
		if err != nil || len(ws) == 0 {
			t.Fatalf("read = %v, %v", ws, err)
		}
		all = append(all, ws...)
	}
	got := winKeys(all)
	slices.Sort(got)
	want := []string{e0 + "-1.0 u1 1 r1 d1", e0 + "-2.0 u2 1 r2 d1", e1 + "-1.1 u3 1 r3 d1", e1 + "-2.1 u4 1 r4 d1", e1 + "-3.1 u5 1 r5 d1"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("wins\n got %q\nwant %q", got, want)
	}
	if err := s.Ack(ctx, "b2", "g", e0+"-1.0", e1+"-2.1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(ctx, "b2", "g", admission.Win{ID: e1 + "-3.1"}, "refused: test"); err != nil {
		t.Fatal(err)
	}
	q.backlog(t, "g", 2, "2 acked, 1 dead")
	ws, err := s.Claim(ctx, "b2", "g", "c2", 0, 10)
	got = winKeys(ws)
	slices.Sort(got)
	want = []string{e0 + "-2.0 u2 1 r2 d2", e1 + "-1.1 u3 1 r3 d2"}
	slices.Sort(want)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("claim = %q, %v; want %q", got, err, want)
	}
	dead, err := s.DeadLetters(ctx, "b2", 10)
	if err != nil || len(dead) != 1 || dead[0].ID != e1+"-3.1" || dead[0].User != "u5" {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	if err := s.Ack(ctx, "b2", "g", e0+"-2.0", e1+"-1.1"); err != nil {
		t.Fatal(err)
	}
	q.backlog(t, "g", 0, "all done")
	if len(q.pending(t, b0, "g"))+len(q.pending(t, b1, "g")) != 0 {
		t.Fatal("entries still pending")
	}
}

// TestRedisQueueConcurrentAcks: consumers on their own connections acknowledge the wins
// of the same entries at once, each win by two of them. An entry stays pending while any of its
// wins is unacknowledged and leaves the pending list with its last; the count of acknowledged
// wins, and so the backlog, counts each win once. Run it with -race.
func TestRedisQueueConcurrentAcks(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, raw := queueStore(t, &redis.Options{Addr: srv.Addr}, Options{})
	const entries, per = 40, 8
	q := newWinsQueue(t, s, raw, "c2", entries*per, entries, 0)
	if err := s.EnsureGroup(ctx, "c2", "g"); err != nil {
		t.Fatal(err)
	}
	for e := range entries {
		var reqs []string
		for k := range per {
			reqs = append(reqs, fmt.Sprintf("u%d", k), "1", fmt.Sprintf("r%d-%d", e, k))
		}
		q.call(t, "c2", reqs...)
	}
	ws, err := s.ReadGroup(ctx, "c2", "g", "c0", entries*per, 0, false)
	if err != nil || len(ws) != entries*per {
		t.Fatalf("read %d wins, %v; want %d", len(ws), err, entries*per)
	}
	stores := make([]*Store, per)
	for i := range stores {
		stores[i], _ = queueStore(t, &redis.Options{Addr: srv.Addr}, Options{})
	}
	// ackAll acknowledges the wins w with ws[i] % per in ks, each twice over, from per
	// goroutines that each take their wins in a random order.
	ackAll := func(ks ...int) {
		var wg sync.WaitGroup
		for g := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewSource(int64(g)))
				var mine []string
				for i, w := range ws {
					if slices.Contains(ks, i%per) && (i%per == g || (i+1)%per == g) {
						mine = append(mine, w.ID)
					}
				}
				rng.Shuffle(len(mine), func(a, b int) { mine[a], mine[b] = mine[b], mine[a] })
				for len(mine) > 0 {
					n := min(len(mine), 1+rng.Intn(5))
					if err := stores[g].Ack(ctx, "c2", "g", mine[:n]...); err != nil {
						t.Error(err)
						return
					}
					mine = mine[n:]
				}
			}()
		}
		wg.Wait()
	}
	ackAll(0, 1, 2, 3, 4, 5, 6)
	if t.Failed() {
		t.FailNow()
	}
	if p := q.pending(t, "c2", "g"); len(p) != entries {
		t.Fatalf("%d entries pending with one win each unacknowledged, want %d", len(p), entries)
	}
	q.backlog(t, "g", entries, "one win per entry left")
	ackAll(0, 1, 2, 3, 4, 5, 6, 7)
	if p := q.pending(t, "c2", "g"); len(p) != 0 {
		t.Fatalf("%d entries pending with every win acknowledged", len(p))
	}
	q.backlog(t, "g", 0, "every win acknowledged")
	if f, err := raw.HGetAll(ctx, s.key("c2", "acked")).Result(); err != nil || len(f) != 1 || f["n g"] != fmt.Sprint(entries*per) {
		t.Fatalf(":acked = %v, %v", f, err)
	}
}

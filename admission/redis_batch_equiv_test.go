package admission

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisBatchMatchesPerRequest runs one random workload (repeated users and request ids,
// quantities above the limit, releases between calls, sell-outs) three ways on one server:
// through the previous admission script, which read and wrote with one command per request
// (testdata/admit_per_request.lua), one request per call; through admit.lua in random batches;
// and through both in turn, as the nodes of a rolling deploy would. Every decision and every key
// the scripts write must come out the same; reservation ids, which are stream entry ids, are
// compared by their position in the stream.
func TestRedisBatchMatchesPerRequest(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, _ := guardRedisStore(t, srv.Addr, nil)
	old, err := os.ReadFile("testdata/admit_per_request.lua")
	if err != nil {
		t.Fatal(err)
	}
	for i, sc := range []struct {
		name                  string
		stock, limit          int64
		users, reqIDs, admits int
	}{
		{"limit3", 30, 3, 20, 30, 300},
		// Few users with a high limit: lists of more than 32 reservations, trimmed inside a batch.
		{"limit40", 75, 40, 2, 400, 400},
	} {
		t.Run(sc.name, func(t *testing.T) {
			w := newEquivWorkload(uint64(i), sc.limit, sc.users, sc.reqIDs, sc.admits)
			var runs []equivRun
			for _, mode := range []string{"old", "new", "mixed"} {
				act := sc.name + "-" + mode
				now := time.Now()
				if _, err := s.Define(ctx, Activity{ID: act, Stock: sc.stock, Limit: sc.limit, Start: now.Add(-time.Minute),
					End: now.Add(time.Hour), PayWithin: time.Minute}, false); err != nil {
					t.Fatal(err)
				}
				runs = append(runs, w.run(t, s, string(old), act, mode))
			}
			if r := runs[0]; r.wins == 0 || r.soldOut == 0 || r.limited == 0 || r.replays == 0 ||
				(sc.limit > MaxResultReservations && r.userWins <= MaxResultReservations) {
				t.Fatalf("the workload misses a path: %d wins (at most %d of one user), %d sold out, %d limit reached, %d replays",
					r.wins, r.userWins, r.soldOut, r.limited, r.replays)
			}
			for _, r := range runs[1:] {
				if !reflect.DeepEqual(r.decisions, runs[0].decisions) {
					t.Errorf("%s decisions differ from the per-request script's:\n%v\nwant\n%v", r.mode, r.decisions, runs[0].decisions)
				}
				for k, want := range runs[0].keys {
					if got := r.keys[k]; !reflect.DeepEqual(got, want) {
						t.Errorf("%s key %s differs from the per-request script's:\n%v\nwant\n%v", r.mode, k, got, want)
					}
				}
			}
		})
	}
}

// equivWorkload is a fixed random sequence of requests cut into batches, with releases between
// batches.
type equivWorkload struct {
	reqs    []Request
	batches []int // sizes
	release []int // after batch i, release the (release[i] mod wins so far)-th win; -1 for none
}

func newEquivWorkload(seed uint64, limit int64, users, reqIDs, admits int) *equivWorkload {
	rng := rand.New(rand.NewPCG(seed, 15))
	w := &equivWorkload{}
	for range admits {
		qty := 1 + rng.Int64N(2)
		if rng.IntN(20) == 0 {
			qty = limit + 1 // bad input
		}
		w.reqs = append(w.reqs, Request{User: fmt.Sprint("u", rng.IntN(users)), Qty: qty, RequestID: fmt.Sprint("r", rng.IntN(reqIDs))})
	}
	for n := 0; n < admits; {
		size := min(1+rng.IntN(24), admits-n)
		w.batches = append(w.batches, size)
		n += size
		r := -1
		if rng.IntN(3) == 0 {
			r = rng.IntN(1 << 20)
		}
		w.release = append(w.release, r)
	}
	return w
}

// equivRun is what one run decided and left in Redis, reservation ids replaced by their position.
type equivRun struct {
	mode                            string
	decisions                       []string
	keys                            map[string]any
	wins, soldOut, limited, replays int
	userWins                        int // the most wins of one user
}

var streamIDIn = regexp.MustCompile(`[0-9]+-[0-9]+`)

func (w *equivWorkload) run(t *testing.T, s *RedisStore, old, act, mode string) equivRun {
	t.Helper()
	ctx := context.Background()
	var (
		ds   []Decision
		errs []error
		wins []string
	)
	decide := func(d Decision, err error) {
		ds, errs = append(ds, d), append(errs, err)
		if err == nil && d.Outcome == Won && !d.Replayed {
			wins = append(wins, d.ReservationID)
		}
	}
	next := 0
	for b, size := range w.batches {
		batch := w.reqs[next : next+size]
		next += size
		if mode == "old" || (mode == "mixed" && b%2 == 1) {
			for _, r := range batch {
				args := []any{"eval", old, 7}
				for _, k := range s.admitKeys(act) {
					args = append(args, k)
				}
				cmd := redis.NewStringSliceCmd(ctx, append(args, r.User, r.Qty, r.RequestID)...)
				_ = s.client.Process(ctx, cmd)
				v, err := cmd.Result()
				if err != nil {
					t.Fatalf("old script: %v", err)
				}
				d, err := redisParseDecision(v)
				if err == nil && d.Outcome == 0 {
					err = ErrBadInput
				}
				decide(d, err)
			}
		} else {
			calls := make([]*admitCall, len(batch))
			for i, r := range batch {
				r.Activity = act
				calls[i] = &admitCall{req: r, done: make(chan admitAnswer, 1)}
			}
			s.runAdmitBatch(ctx, act, calls)
			for _, c := range calls {
				a := <-c.done
				decide(a.d, a.err)
			}
		}
		if r := w.release[b]; r >= 0 && len(wins) > 0 {
			if _, err := s.Release(ctx, act, wins[r%len(wins)]); err != nil {
				t.Fatal(err)
			}
		}
	}

	entries, err := s.client.XRange(ctx, s.key(act, "orders"), "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]string{}
	var stream []string
	for i, e := range entries {
		pos[e.ID] = fmt.Sprint("#", i)
		stream = append(stream, fmt.Sprint(e.Values["user"], " ", e.Values["qty"], " ", e.Values["req"]))
	}
	norm := func(v string) string {
		return streamIDIn.ReplaceAllStringFunc(v, func(id string) string {
			if p, ok := pos[id]; ok {
				return p
			}
			return id
		})
	}
	r := equivRun{mode: mode, keys: map[string]any{"orders": stream}}
	perUser := map[string]int{}
	for i, d := range ds {
		switch {
		case errors.Is(errs[i], ErrBadInput):
			r.decisions = append(r.decisions, "bad input")
			continue
		case errs[i] != nil:
			t.Fatalf("request %d: %v", i, errs[i])
		case d.Replayed:
			r.replays++
		case d.Outcome == Won:
			r.wins++
			perUser[w.reqs[i].User]++
			r.userWins = max(r.userWins, perUser[w.reqs[i].User])
		case d.Outcome == SoldOut:
			r.soldOut++
		case d.Outcome == LimitReached:
			r.limited++
		}
		r.decisions = append(r.decisions, fmt.Sprint(d.Outcome, " ", d.Remaining, " ", norm(d.ReservationID), " ", d.Replayed))
	}
	stock, err := s.client.Get(ctx, s.key(act, "stock")).Result()
	if err != nil {
		t.Fatal(err)
	}
	r.keys["stock"] = stock
	for _, k := range []string{"buyers", "req", "resv", "released", "results"} {
		m, err := s.client.HGetAll(ctx, s.key(act, k)).Result()
		if err != nil {
			t.Fatal(err)
		}
		var fields []string
		for f, v := range m {
			if k == "released" {
				v = "" // the caller's random token
			}
			fields = append(fields, norm(f)+" = "+norm(v))
		}
		slices.Sort(fields)
		r.keys[k] = fields
	}
	return r
}

// BenchmarkRedisAdmitScript measures the admission script alone: one caller sends calls of a
// fixed batch size to a private redis-server, one after the other, and the server's own figures
// give its cost per admission: script_µs/admit from INFO commandstats (the usec of EVALSHA, the
// script's run without parsing or the round trip) and server_µs/admit from INFO cpu (the whole
// server, parsing and replies included). Each path runs through admit.lua ("batched") and through
// the previous per-request script ("per_request", testdata/admit_per_request.lua) on the same
// server in the same run, so their ratio does not depend on what else the machine does.
func BenchmarkRedisAdmitScript(b *testing.B) {
	srv := testsrv.StartRedis(b)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	b.Cleanup(func() { _ = client.Close() })
	s, err := NewRedisStore(client, RedisOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	old, err := os.ReadFile("testdata/admit_per_request.lua")
	if err != nil {
		b.Fatal(err)
	}
	for _, path := range []struct {
		name  string
		stock int64
	}{{"won", 1 << 50}, {"sold_out", 0}} {
		for _, batch := range []int{1, 64} {
			for _, script := range []struct{ name, src string }{{"per_request", string(old)}, {"batched", luaAdmit}} {
				b.Run(fmt.Sprintf("%s_batch%d_%s", path.name, batch, script.name), func(b *testing.B) {
					redisBenchScript(b, s, script.src, path.stock, batch)
				})
			}
		}
	}
}

func redisBenchScript(b *testing.B, s *RedisStore, src string, stock int64, batch int) {
	ctx := context.Background()
	_ = s.Delete(ctx, "script", true)
	now := time.Now()
	if _, err := s.Define(ctx, Activity{ID: "script", Stock: stock, Limit: 1, Start: now.Add(-time.Minute),
		End: now.Add(time.Hour), PayWithin: time.Minute}, true); err != nil {
		b.Fatal(err)
	}
	sha, err := s.client.ScriptLoad(ctx, src).Result()
	if err != nil {
		b.Fatal(err)
	}
	keys := s.admitKeys("script")
	head := []any{"evalsha", sha, len(keys)}
	for _, k := range keys {
		head = append(head, k)
	}
	if err := s.client.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	cpu0 := redisServerCPU(b, s.client)
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		args := slices.Clone(head)
		for j := i; j < min(i+batch, b.N); j++ {
			args = append(args, fmt.Sprint("u", j), 1, "r")
		}
		if err := s.client.Do(ctx, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := redisServerCPU(b, s.client) - cpu0
	info, err := s.client.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var usec int64
	if os.Getenv("SECKILL_BENCH_CMDSTATS") != "" {
		b.Log(info)
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for kv := range strings.SplitSeq(v, ",") {
				if u, ok := strings.CutPrefix(kv, "usec="); ok {
					usec, _ = strconv.ParseInt(u, 10, 64)
				}
			}
		}
	}
	b.ReportMetric(float64(usec)/float64(b.N), "script_µs/admit")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "server_µs/admit")
}

// redisServerCPU is the CPU time redis-server has used (INFO cpu).
func redisServerCPU(b *testing.B, c redis.UniversalClient) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return testsrv.RedisCPU(b, info)
}

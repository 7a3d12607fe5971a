package orderbackend

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// The benchmarks below turn b.N wins into orders and report, besides ns/op (one op is one
// order), the CPU every process involved spent per order: this process (the consumer, and
// SQLite, which runs inside it), and redis-server and the PostgreSQL backends when used. On a
// shared two-core machine the CPU per order is the figure that matters (the order path competes
// with the gateway), and it is less sensitive to the load than the elapsed time. Compare
// variants only within one run, interleaved: see orderbackend/README.md.

// cpuMeter reads the CPU time spent so far by this process and by the servers a benchmark uses.
type cpuMeter struct {
	redis *redis.Client     // nil: no redis-server
	pg    *testsrv.Postgres // nil: no PostgreSQL
}

type cpuReading struct{ self, redis, pg time.Duration }

func (m cpuMeter) read(b *testing.B) cpuReading {
	b.Helper()
	var r cpuReading
	r.self = testsrv.ProcessCPU(b)
	if m.redis != nil {
		info, err := m.redis.Info(context.Background(), "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		r.redis = testsrv.RedisCPU(b, info)
	}
	if m.pg != nil {
		r.pg = postgresCPU(b, m.pg)
	}
	return r
}

// report adds the CPU per order between two readings to the benchmark's figures.
func (m cpuMeter) report(b *testing.B, from, to cpuReading, orders int) {
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(orders) }
	b.ReportMetric(per(to.self-from.self), "self-cpu-µs/order")
	total := to.self - from.self
	if m.redis != nil {
		b.ReportMetric(per(to.redis-from.redis), "redis-cpu-µs/order")
		total += to.redis - from.redis
	}
	if m.pg != nil {
		b.ReportMetric(per(to.pg-from.pg), "pg-cpu-µs/order")
		total += to.pg - from.pg
	}
	b.ReportMetric(per(total), "cpu-µs/order")
}

// clockTick is the unit of /proc/PID/stat's CPU times (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// postgresCPU sums the CPU time of the private cluster's postmaster and its children (the
// backends serving the benchmark's connections stay up for the whole measurement).
func postgresCPU(b *testing.B, pg *testsrv.Postgres) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(pg.Dir, "data", "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	first, _, _ := strings.Cut(string(raw), "\n")
	postmaster, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		b.Fatalf("postmaster.pid: %v", err)
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		ppid, cpu, ok := procStat(pid)
		if ok && (pid == postmaster || ppid == postmaster) {
			total += cpu
		}
	}
	return total
}

// procStat reads a process's parent and CPU time (utime + stime) from /proc/PID/stat.
func procStat(pid int) (ppid int, cpu time.Duration, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	defer func() { _ = f.Close() }()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, 0, false
	}
	// The command name is in parentheses and may hold spaces: the fields start after the last ')'.
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, 0, false
	}
	fs := strings.Fields(line[i+1:])
	if len(fs) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(fs[1])                // field 4
	utime, _ := strconv.ParseInt(fs[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(fs[12], 10, 64) // field 15
	return ppid, time.Duration(utime+stime) * clockTick, true
}

// benchRepo opens a fresh repository: an SQLite file, or a new database in pg.
func benchRepo(b *testing.B, pg *testsrv.Postgres) Repository {
	b.Helper()
	var (
		r   Repository
		err error
	)
	if pg != nil {
		r, err = NewPostgres(context.Background(), pg.Database(b, fmt.Sprintf("b%d", dbSeq.Add(1))))
	} else {
		r, err = NewSQLite(context.Background(), filepath.Join(b.TempDir(), "orders.db"))
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Close() })
	return r
}

// BenchmarkCreateOrders turns b.N wins into orders straight through the repository: one
// transaction per win (one: CreateOrder) or one per 64 wins (batch64: CreateOrders).
// SECKILL_BENCH_PG=1 adds PostgreSQL.
func BenchmarkCreateOrders(b *testing.B) {
	kinds := []string{"sqlite"}
	var pg *testsrv.Postgres
	if os.Getenv("SECKILL_BENCH_PG") == "1" {
		kinds = append(kinds, "postgres")
		pg = testsrv.StartPostgres(b)
	}
	for _, kind := range kinds {
		b.Run(kind, func(b *testing.B) {
			var m cpuMeter
			if kind == "postgres" {
				m.pg = pg
			}
			variants := []struct {
				name  string
				batch int
			}{{"one", 1}, {"batch64", 64}}
			for _, v := range variants {
				b.Run(v.name, func(b *testing.B) {
					db := pg
					if kind == "sqlite" {
						db = nil
					}
					repo := benchRepo(b, db)
					ctx := context.Background()
					if err := repo.EnsureStock(ctx, "a", int64(b.N)); err != nil {
						b.Fatal(err)
					}
					now := time.Now()
					ns := make([]NewOrder, b.N)
					for i := range ns {
						ns[i] = NewOrder{ID: NewOrderID(), Activity: "a", ReservationID: fmt.Sprintf("%d-%d", now.UnixMilli(), i),
							User: fmt.Sprintf("user-%07d", i), Qty: 1, CreatedAt: now, ExpiresAt: now.Add(15 * time.Minute)}
					}
					b.ReportAllocs()
					from := m.read(b)
					b.ResetTimer()
					start := time.Now()
					for lo := 0; lo < len(ns); {
						var err error
						if v.batch == 1 {
							_, _, err = repo.CreateOrder(ctx, ns[lo])
							lo++
						} else {
							hi := min(lo+v.batch, len(ns))
							var outs []CreateOutcome
							outs, err = repo.CreateOrders(ctx, ns[lo:hi])
							for _, o := range outs {
								if err == nil && !o.Created {
									err = fmt.Errorf("outcome %+v", o)
								}
							}
							lo = hi
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					elapsed := time.Since(start)
					b.StopTimer()
					m.report(b, from, m.read(b), b.N)
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "orders/s")
					if s, err := repo.Stock(ctx, "a"); err != nil || s.Left != 0 {
						b.Fatalf("stock = %+v, %v; want all sold", s, err)
					}
				})
			}
		})
	}
}

// BenchmarkConsumer turns b.N queued wins into orders through the real consumer, read 64 at a
// time: per_win handles each win as the consumer did before batches (one transaction, publish and
// Ack per win), batch is handleBatch (one transaction, the publishes at once, one Ack). The shapes
// are the embedded one (memory store, SQLite) and the standalone one (redis-server, with its
// auto-pipeliner off and on, and SQLite or, with SECKILL_BENCH_PG=1, PostgreSQL).
func BenchmarkConsumer(b *testing.B) {
	type shape struct {
		name     string
		redis    bool
		pipeline bool
		pg       bool
	}
	shapes := []shape{
		{"memory+sqlite", false, false, false},
		{"redis+sqlite", true, false, false},
		{"redis_autopipeline+sqlite", true, true, false},
	}
	var pg *testsrv.Postgres
	if os.Getenv("SECKILL_BENCH_PG") == "1" {
		shapes = append(shapes, shape{"redis+postgres", true, false, true}, shape{"redis_autopipeline+postgres", true, true, true})
		pg = testsrv.StartPostgres(b)
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			for _, batched := range []bool{false, true} {
				name := "per_win"
				if batched {
					name = "batch"
				}
				b.Run(name, func(b *testing.B) {
					ctx := context.Background()
					var (
						m     cpuMeter
						store admission.Store
						db    *testsrv.Postgres
					)
					if sh.pg {
						db, m.pg = pg, pg
					}
					if sh.redis {
						srv := testsrv.StartRedis(b)
						client := redis.NewClient(&redis.Options{Addr: srv.Addr})
						s, err := redisstore.New(client, redisstore.Options{AutoPipeline: sh.pipeline})
						if err != nil {
							b.Fatal(err)
						}
						store = s
						m.redis = redis.NewClient(&redis.Options{Addr: srv.Addr})
						b.Cleanup(func() { _ = m.redis.Close() })
					} else {
						store = localstore.NewMemory(localstore.MemoryOptions{})
					}
					b.Cleanup(func() { _ = store.Close() })
					repo := benchRepo(b, db)
					now := time.Now()
					if _, err := store.Define(ctx, admission.Activity{ID: "sale", Stock: int64(b.N), Limit: 1,
						Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: 15 * time.Minute}, false); err != nil {
						b.Fatal(err)
					}
					for i := range b.N {
						d, err := store.Admit(ctx, admission.Request{Activity: "sale", User: fmt.Sprintf("user-%07d", i), Qty: 1, RequestID: "q"})
						if err != nil || d.Outcome != admission.Won {
							b.Fatalf("admit %d = %+v, %v", i, d, err)
						}
					}
					mt := new(Metrics)
					c, err := NewConsumer(store, repo, "sale", ConsumerOptions{Name: "bench", Metrics: mt})
					if err != nil {
						b.Fatal(err)
					}
					if err := store.EnsureGroup(ctx, "sale", DefaultGroup); err != nil {
						b.Fatal(err)
					}
					if err := c.syncDefinition(ctx); err != nil {
						b.Fatal(err)
					}
					from := m.read(b)
					b.ResetTimer()
					start := time.Now()
					for {
						ws, err := store.ReadGroup(ctx, "sale", DefaultGroup, "bench", c.opts.Batch, 0, false)
						if err != nil {
							b.Fatal(err)
						}
						if len(ws) == 0 {
							break
						}
						if batched {
							done, err := c.handleBatch(ctx, ws)
							if err != nil || !done {
								b.Fatalf("batch: done %v, %v", done, err)
							}
							continue
						}
						for _, w := range ws {
							next, o, err := c.process(ctx, w)
							if err == nil && next == stepFinish {
								err = c.finish(ctx, []finishing{{w, o}})
							}
							if err != nil || next != stepFinish {
								b.Fatalf("win %+v: %v, %v", w, next, err)
							}
						}
					}
					elapsed := time.Since(start)
					b.StopTimer()
					m.report(b, from, m.read(b), b.N)
					b.ReportMetric(float64(b.N)/elapsed.Seconds(), "orders/s")
					if n := mt.OrdersCreated.Load(); n != int64(b.N) {
						b.Fatalf("%d orders created, want %d", n, b.N)
					}
					if p, err := store.ReadGroup(ctx, "sale", DefaultGroup, "bench", 10, 0, true); err != nil || len(p) != 0 {
						b.Fatalf("pending after the run: %d, %v", len(p), err)
					}
				})
			}
		})
	}
}

// BenchmarkConsumers10 is the embedded backend during a sale: 10 activities, each with its own
// consumer (the real Run loop), on one SQLite repository and the memory store; b.N wins in all,
// b.N/10 per activity. Feeds: backlog queues every win before the consumers start (a backlog after
// an outage; each read is a full batch); steady admits them at 10,000 wins/s spread over the
// activities while the consumers run (the brief's sale: about 1,000 wins/s per activity, and a
// consumer reads as soon as a win arrives, so its batches are tiny); slow at 2,000 wins/s (about
// what seckill-bench's embedded sale reaches, 2,800 wins/s of gateway time). Variants: alone runs
// every CreateOrders call in a transaction of its own (as before group commit); group shares the
// writer's transactions among the calls waiting for it; _lingerN sets the consumers' Linger (off
// otherwise). Besides the CPU per order, it reports the mean wins per read batch and per
// transaction, and with a rate the time from admission to order (lag, whole ms, as the order keeps
// its creation time). CPU includes the feed's Admit calls, the same in every variant.
func BenchmarkConsumers10(b *testing.B) {
	const activities = 10
	type variant struct {
		name   string
		alone  bool
		linger time.Duration // ConsumerOptions.Linger; -1: off
	}
	off := time.Duration(-1)
	feeds := []struct {
		name     string
		rate     float64 // wins/s over all activities; 0: all queued first
		variants []variant
	}{
		{"backlog", 0, []variant{{"alone", true, off}, {"group", false, off}}},
		{"steady", 10_000, []variant{{"alone", true, off}, {"group", false, off}, {"alone_linger5ms", true, 5 * time.Millisecond},
			{"group_linger2ms", false, 2 * time.Millisecond}, {"group_linger5ms", false, 5 * time.Millisecond},
			{"group_linger10ms", false, 10 * time.Millisecond}, {"group_linger20ms", false, 20 * time.Millisecond}}},
		{"slow", 2_000, []variant{{"alone", true, off}, {"group", false, off}, {"group_linger5ms", false, 5 * time.Millisecond},
			{"group_linger10ms", false, 10 * time.Millisecond}, {"group_linger20ms", false, 20 * time.Millisecond}}},
	}
	for _, feed := range feeds {
		b.Run(feed.name, func(b *testing.B) {
			for _, v := range feed.variants {
				b.Run(v.name, func(b *testing.B) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					store := localstore.NewMemory(localstore.MemoryOptions{})
					b.Cleanup(func() { _ = store.Close() })
					repo, err := NewSQLite(ctx, filepath.Join(b.TempDir(), "orders.db"))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = repo.Close() })
					repo.line.off = v.alone

					perAct := (b.N + activities - 1) / activities
					total := perAct * activities
					now := time.Now()
					acts := make([]string, activities)
					for a := range acts {
						acts[a] = fmt.Sprintf("sale%02d", a)
						if _, err := store.Define(ctx, admission.Activity{ID: acts[a], Stock: int64(perAct), Limit: 1,
							Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: 15 * time.Minute}, false); err != nil {
							b.Fatal(err)
						}
						if err := store.EnsureGroup(ctx, acts[a], DefaultGroup); err != nil {
							b.Fatal(err)
						}
						if err := repo.EnsureStock(ctx, acts[a], int64(perAct)); err != nil {
							b.Fatal(err)
						}
					}
					admitted := make([]time.Time, total) // win k: activity k%activities, user k/activities
					admit := func(k int) {
						act, user := acts[k%activities], fmt.Sprintf("user-%07d", k/activities)
						admitted[k] = time.Now()
						d, err := store.Admit(ctx, admission.Request{Activity: act, User: user, Qty: 1, RequestID: "q"})
						if err != nil || d.Outcome != admission.Won {
							b.Errorf("admit %s %s = %+v, %v", act, user, d, err)
						}
					}
					if feed.rate == 0 {
						for k := range total {
							admit(k)
						}
					}
					mt := new(Metrics)
					from := cpuMeter{}.read(b)
					b.ResetTimer()
					start := time.Now()
					var wg sync.WaitGroup
					for _, act := range acts {
						c, err := NewConsumer(store, repo, act, ConsumerOptions{Name: "bench", Metrics: mt, Linger: v.linger})
						if err != nil {
							b.Fatal(err)
						}
						wg.Go(func() {
							if err := c.Run(ctx); err != nil {
								b.Error(err)
							}
						})
					}
					if feed.rate > 0 {
						wg.Go(func() {
							for k := 0; k < total; {
								// As many as the rate allows by now: a late tick catches up.
								due := min(total, int(time.Since(start).Seconds()*feed.rate)+1)
								for ; k < due; k++ {
									admit(k)
								}
								time.Sleep(time.Millisecond)
							}
						})
					}
					for mt.OrdersCreated.Load() < int64(total) {
						time.Sleep(2 * time.Millisecond)
					}
					elapsed := time.Since(start)
					b.StopTimer()
					cancel()
					wg.Wait()
					cpuMeter{}.report(b, from, cpuMeter{}.read(b), total)
					b.ReportMetric(float64(total)/elapsed.Seconds(), "orders/s")
					s := mt.Snapshot()
					b.ReportMetric(float64(s.BatchWins)/float64(s.Batches), "wins/batch")
					st := repo.TxStats()
					b.ReportMetric(float64(st.Wins)/float64(st.Transactions), "wins/tx")
					if feed.rate > 0 {
						var lags []float64
						for a, act := range acts {
							os, err := repo.Orders(context.Background(), act)
							if err != nil {
								b.Fatal(err)
							}
							for _, o := range os {
								u, err := strconv.Atoi(strings.TrimPrefix(o.User, "user-"))
								if err != nil {
									b.Fatal(err)
								}
								// Both in whole milliseconds, as the order keeps its creation time.
								at := time.UnixMilli(admitted[u*activities+a].UnixMilli())
								lags = append(lags, float64(o.CreatedAt.Sub(at).Milliseconds()))
							}
						}
						slices.Sort(lags)
						b.ReportMetric(lags[len(lags)/2], "lag-p50-ms")
						b.ReportMetric(lags[len(lags)*99/100], "lag-p99-ms")
					}
				})
			}
		})
	}
}

package caddymodule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// The hot-path benchmarks drive Caddy's own server handler (caddyhttp.Server.ServeHTTP) in this
// process, without sockets, with the configuration cmd/seckill-bench gives the gateway: every
// layer of the funnel on (IP and user limits, JWT, hashed path), captcha off. Each seckill figure
// has its yardstick in the same run: BenchmarkHotPath/respond is Caddy's static_response handler
// in the same server answering the same request, so the figures to compare are the ratios of
// ns/op and the allocs/op, which do not depend on the machine's load.
//
//	go test ./caddymodule/ -run '^$' -bench HotPath -benchmem
//
// BenchmarkHotPathRedis runs the same cases with store redis on a private redis-server, one
// request at a time, so ns/op is mostly the round trip's latency. What a request costs the
// machine is the CPU: it also reports this process's CPU time per request (cpu_µs/op, the
// benchmark's loop included, as in every case) and redis-server's (redis_µs/op, from INFO cpu).
//
// The limits are high enough that no request is refused by them: the benchmarks measure what a
// limiter costs, not what it refuses.

// benchUsers is how many distinct users (tokens, addresses, buy paths) the benchmarks cycle
// through.
const benchUsers = 1024

// hotSale is a Caddy server with the bench's configuration and its users.
type hotSale struct {
	srv   http.Handler
	host  string
	users []hotUser
	redis *redis.Client // the store's server, for its CPU time; nil with the memory store
}

// hotUser is one buyer: its token, address and buy path in each activity.
type hotUser struct {
	auth  string
	ip    string
	paths map[string]string
}

// startHotSale runs Caddy with activities "open" (stock and limit too large to run out: every buy
// wins), "gone" (stock 0, sold out and flagged after the first buy), "line" (a waiting room every
// user has joined) and the respond yardstick.
// store is the seckill app's store line ("" for the memory store).
func startHotSale(b testing.TB, store string) *hotSale {
	b.Helper()
	port := freePort(b)
	now := time.Now()
	start, end := now.Add(-time.Minute), now.Add(24*time.Hour)
	cf := fmt.Sprintf(`{
	admin off
	auto_https off
	persist_config off
	storage file_system %s
	log {
		level ERROR
	}
	servers {
		trusted_proxies static 192.0.2.0/24
	}
	seckill {
		%s
		%s
		url_secret bench-url-secret-0123456789abcdef
		captcha off
		rate_limit ip 1000000/s burst 1000000
		rate_limit user 1000000/s burst 1000000
		%s
		%s
		%s
	}
}

http://:%d {
	bind 127.0.0.1
	route /seckill/* {
		seckill
	}
	route /baseline/* {
		respond `+"`"+`{"code":"ok","message":"respond baseline"}`+"`"+` 200
	}
}
`, b.TempDir(), store, jwtBlock, activityBlock("open", 1_000_000_000, 1_000_000_000, start, end, 0),
		activityBlock("gone", 0, 1, start, end, 0), roomBlock("line", 1, start, end, "admit 1/h"), port)
	runCaddyfile(b, cf)
	v, err := caddy.ActiveContext().App("http")
	if err != nil {
		b.Fatal(err)
	}
	servers := v.(*caddyhttp.App).Servers
	if len(servers) != 1 {
		b.Fatalf("%d servers", len(servers))
	}
	s := &hotSale{host: "127.0.0.1:" + strconv.Itoa(port)}
	for _, srv := range servers {
		s.srv = srv
	}
	for i := range benchUsers {
		u := hotUser{
			auth:  "Bearer " + token(b, "u"+strconv.Itoa(i)),
			ip:    fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255),
			paths: map[string]string{},
		}
		for _, act := range []string{"open", "gone"} {
			w := s.serve(s.request(http.MethodPost, "/seckill/"+act+"/path", u, ""))
			if w.status != http.StatusOK {
				b.Fatalf("path %s: %d %s", act, w.status, w.body)
			}
			var a struct{ Path string }
			if err := json.Unmarshal(w.body, &a); err != nil || a.Path == "" {
				b.Fatalf("path %s: %s", act, w.body)
			}
			u.paths[act] = a.Path
		}
		s.users = append(s.users, u)
	}
	// Every user joins the waiting room of "line" (the first is admitted, the others wait).
	for _, u := range s.users {
		if w := s.serve(s.request(http.MethodPost, "/seckill/line/queue", u, "")); w.status != http.StatusOK {
			b.Fatalf("join line: %d %s", w.status, w.body)
		}
	}
	// Sell "gone" out: the first buy finds no stock and sets the node's sold-out flag; a keyed buy
	// then waits for the held set (empty) that keeps keys of no held win off the store.
	s.serve(s.request(http.MethodPost, s.users[0].paths["gone"], s.users[0], ""))
	if !app(b).Guard().SoldOut("gone") {
		b.Fatal("activity gone is not flagged sold out")
	}
	return s
}

// request builds a request of user u as the bench sends it (through a trusted proxy, the user's
// address in X-Forwarded-For); idem, when set, is its Idempotency-Key.
func (s *hotSale) request(method, path string, u hotUser, idem string) *http.Request {
	r, err := http.NewRequest(method, "http://"+s.host+path, nil)
	if err != nil {
		panic(err)
	}
	r.RemoteAddr = "192.0.2.1:4321"
	r.RequestURI = path
	r.Header["X-Forwarded-For"] = []string{u.ip}
	r.Header["Authorization"] = []string{u.auth}
	if idem != "" {
		r.Header["Idempotency-Key"] = []string{idem}
	}
	return r
}

// serve runs one request through the server.
func (s *hotSale) serve(r *http.Request) *sinkWriter {
	w := &sinkWriter{header: http.Header{}}
	s.srv.ServeHTTP(w, r)
	return w
}

// sinkWriter is a ResponseWriter that keeps the status and the body; reset empties it for reuse,
// so that a benchmark counts the server's allocations rather than a recorder's.
type sinkWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *sinkWriter) Header() http.Header { return w.header }

func (w *sinkWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *sinkWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *sinkWriter) reset() {
	clear(w.header)
	w.status = 0
	w.body = w.body[:0]
}

// BenchmarkHotPath measures one request of each path of the funnel against the respond yardstick.
// The requests are built before the timer starts (one per user, reused: the handler changes
// nothing in them that the next round depends on).
func BenchmarkHotPath(b *testing.B) {
	benchHotPath(b, startHotSale(b, ""))
}

// BenchmarkHotPathRedis is BenchmarkHotPath with store redis (group admission, the default).
func BenchmarkHotPathRedis(b *testing.B) {
	rd := testsrv.StartRedis(b)
	s := startHotSale(b, "store redis "+rd.Addr)
	s.redis = redis.NewClient(&redis.Options{Addr: rd.Addr})
	defer s.redis.Close()
	benchHotPath(b, s)
}

// redisCPU returns the CPU time redis-server has used.
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	return testsrv.RedisCPU(b, info)
}

func benchHotPath(b *testing.B, s *hotSale) {
	// Each case: the request of user i, and the status its answer must have.
	cases := []struct {
		name   string
		status int
		req    func(u hotUser, i int) *http.Request
	}{
		{"respond", http.StatusOK, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodPost, "/baseline"+u.paths["open"], u, "")
		}},
		// The soak's press: the node-local sold-out flag answers before the token is read.
		{"sold_out", http.StatusGone, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodPost, u.paths["gone"], u, "")
		}},
		// The burst's press after the sell-out with a key that is no held win's: once the held
		// request ids are loaded, the flag answers it before the token is read, as sold_out.
		{"sold_out_keyed", http.StatusGone, func(u hotUser, i int) *http.Request {
			return s.request(http.MethodPost, u.paths["gone"], u, "key-"+strconv.Itoa(i))
		}},
		// The buy path proper: every check, then the memory store's admission, a win.
		{"won", http.StatusAccepted, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodPost, u.paths["open"], u, "")
		}},
		{"status", http.StatusOK, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodGet, "/seckill/open", u, "")
		}},
		// A winner's poll (every user has won in "open" by now): the record is "queued".
		{"result", http.StatusOK, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodGet, "/seckill/open/result", u, "")
		}},
		// A waiting buyer's poll of the waiting room: one line read from the store.
		{"queue_poll", http.StatusOK, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodGet, "/seckill/line/queue", u, "")
		}},
		// A poll of a user with no record ("gone" sold nothing): "none".
		{"result_none", http.StatusOK, func(u hotUser, _ int) *http.Request {
			return s.request(http.MethodGet, "/seckill/gone/result", u, "")
		}},
	}
	for _, c := range cases {
		reqs := make([]*http.Request, len(s.users))
		for i, u := range s.users {
			reqs[i] = c.req(u, i)
		}
		// Until the held request ids are loaded a keyed press goes the whole way to the store;
		// wait for them so that the keyed case measures the steady state.
		if c.name == "sold_out_keyed" {
			waitHeldLoaded(b, s, reqs[0])
		}
		// The result cases must not depend on which benchmarks ran before them (-bench
		// HotPath/result alone): every user holds an item in "open" first.
		if c.name == "result" {
			for _, u := range s.users {
				if w := s.serve(s.request(http.MethodPost, u.paths["open"], u, "")); w.status != http.StatusAccepted {
					b.Fatalf("winning buy: %d %s", w.status, w.body)
				}
			}
		}
		if want, ok := map[string]string{"result": `{"code":"queued","reservation_id":"`, "result_none": `{"code":"none"}` + "\n"}[c.name]; ok {
			if w := s.serve(reqs[0]); !strings.HasPrefix(string(w.body), want) {
				b.Fatalf("%s: answered %d %q, want %q...", c.name, w.status, w.body, want)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			w := &sinkWriter{header: http.Header{}}
			b.ReportAllocs()
			var cpu0, redis0 time.Duration
			if s.redis != nil {
				cpu0, redis0 = testsrv.ProcessCPU(b), redisCPU(b, s.redis)
			}
			i := 0
			for b.Loop() {
				w.reset()
				s.srv.ServeHTTP(w, reqs[i])
				if w.status != c.status {
					b.Fatalf("%s: got %d %s", c.name, w.status, w.body)
				}
				if i++; i == len(reqs) {
					i = 0
				}
			}
			if s.redis != nil {
				b.ReportMetric(float64((testsrv.ProcessCPU(b)-cpu0).Nanoseconds())/1e3/float64(b.N), "cpu_µs/op")
				b.ReportMetric(float64((redisCPU(b, s.redis)-redis0).Nanoseconds())/1e3/float64(b.N), "redis_µs/op")
			}
		})
	}
}

// waitHeldLoaded sends the keyed request once, which the store answers, then waits for the Guard
// to load the (empty) set of held request ids in the background, after which the flag answers
// keyed requests itself. Loading from the memory store takes microseconds.
func waitHeldLoaded(b testing.TB, s *hotSale, r *http.Request) {
	b.Helper()
	if w := s.serve(r); w.status != http.StatusGone {
		b.Fatalf("keyed sold-out buy: %d %s", w.status, w.body)
	}
	for deadline := time.Now().Add(5 * time.Second); !app(b).Guard().HeldLoaded("gone"); {
		if time.Now().After(deadline) {
			b.Fatal("the held request ids of gone never loaded")
		}
		time.Sleep(time.Millisecond)
	}
}

// SetWriteDeadline and SetReadDeadline let Caddy's idle-timeout wrappers extend deadlines as they
// do on a real connection (through http.ResponseController), instead of building the error of a
// writer that cannot.
func (w *sinkWriter) SetWriteDeadline(time.Time) error { return nil }

func (w *sinkWriter) SetReadDeadline(time.Time) error { return nil }

// BenchmarkHotPathFresh sends what scripts/bench-wrk.sh sends: every request from a user the
// gateway has not seen buy before (its own token, address and hashed path, asked for in the
// setup) with its own Idempotency-Key, so that every buy wins and grows every table a flash
// sale's first presses grow (the limiters', the store's). respond receives the very same
// requests. 64 callers send them at once. Run it with -benchtime Nx, N at most freshUsers
// (beyond it the buys are replays):
//
//	go test ./caddymodule/ -run '^$' -bench HotPathFresh -benchtime 100000x -benchmem
func BenchmarkHotPathFresh(b *testing.B) {
	for _, store := range []struct{ name, line string }{{"memory", ""}, {"local", "store local " + b.TempDir()}} {
		b.Run(store.name, func(b *testing.B) {
			s := startHotSale(b, store.line)
			const freshUsers = 100_000
			buys := make([]*http.Request, freshUsers)
			yard := make([]*http.Request, freshUsers)
			for i := range buys {
				u := hotUser{
					auth:  "Bearer " + token(b, "f"+strconv.Itoa(i)),
					ip:    fmt.Sprintf("10.%d.%d.%d", 128+i>>16&127, i>>8&255, i&255),
					paths: map[string]string{},
				}
				w := s.serve(s.request(http.MethodPost, "/seckill/open/path", u, ""))
				var a struct{ Path string }
				if err := json.Unmarshal(w.body, &a); w.status != http.StatusOK || err != nil || a.Path == "" {
					b.Fatalf("path: %d %s", w.status, w.body)
				}
				key := "fresh-" + strconv.Itoa(i)
				buys[i] = s.request(http.MethodPost, a.Path, u, key)
				yard[i] = s.request(http.MethodPost, "/baseline"+a.Path, u, key)
			}
			for _, c := range []struct {
				name   string
				status int
				reqs   []*http.Request
			}{{"won", http.StatusAccepted, buys}, {"respond", http.StatusOK, yard}} {
				b.Run(c.name, func(b *testing.B) {
					// 64 callers, as wrk's 64 connections: a local store's buy waits for its
					// commit, which its batch shares with the others'.
					b.SetParallelism(32)
					b.ReportAllocs()
					var next atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						w := &sinkWriter{header: http.Header{}}
						for pb.Next() {
							w.reset()
							s.srv.ServeHTTP(w, c.reqs[int(next.Add(1)-1)%len(c.reqs)])
							if w.status != c.status {
								b.Errorf("%s: got %d %s", c.name, w.status, w.body)
								return
							}
						}
					})
				})
			}
		})
	}
}

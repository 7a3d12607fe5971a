package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/proc"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// binaries are cmd/caddy and cmd/orderbackend, built once per test binary, by the first scenario
// that runs (so that `go test ./... -run Other` does not pay for the build), into a folder TestMain
// removes at the end. They are built without -race: the test process has it, the servers under
// test need not be slowed down.
type binaries struct {
	once                sync.Once
	dir                 string
	caddy, orderbackend string
	err                 error
}

var bins binaries

func TestMain(m *testing.M) {
	code := m.Run()
	if bins.dir != "" {
		_ = os.RemoveAll(bins.dir)
	}
	os.Exit(code)
}

// build compiles both commands with one go build, from the module root (the parent of the
// package's folder, where go test runs), once.
func (b *binaries) build(t *testing.T) {
	t.Helper()
	b.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("no go command to build the servers under test: %w", err)
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "seckill-chaos-"); b.err != nil {
			return
		}
		began := time.Now()
		cmd := exec.Command(gobin, "build", "-o", b.dir+string(filepath.Separator), "./cmd/caddy", "./cmd/orderbackend")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/caddy ./cmd/orderbackend: %w\n%s", err, out)
			return
		}
		b.caddy, b.orderbackend = filepath.Join(b.dir, "caddy"), filepath.Join(b.dir, "orderbackend")
		t.Logf("built cmd/caddy and cmd/orderbackend in %s", time.Since(began).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
}

// mode is the size of the run: short by default (CI), full with SECKILL_CHAOS=full.
type mode struct {
	full   bool
	users  int // buyers of one sale
	stock  int64
	conc   int           // buyers in flight at once
	rounds int           // faults per scenario where a scenario repeats its fault
	down   time.Duration // how long redis-server stays killed
	pause  time.Duration // how long redis-server stays stopped (SIGSTOP)
	pgDown time.Duration // how long PostgreSQL stays stopped
	drain  time.Duration // how long the queue may take to drain before reconcile must pass
}

func currentMode() mode {
	if os.Getenv("SECKILL_CHAOS") == "full" {
		return mode{full: true, users: 3000, stock: 1000, conc: 64, rounds: 3,
			down: 5 * time.Second, pause: 5 * time.Second, pgDown: 30 * time.Second, drain: 3 * time.Minute}
	}
	return mode{users: 300, stock: 100, conc: 32, rounds: 1,
		down: 3 * time.Second, pause: 5 * time.Second, pgDown: 5 * time.Second, drain: time.Minute}
}

// Secrets of the private deployment.
const (
	jwtSecret = "chaos-jwt-secret-0123456789abcdef"
	urlSecret = "chaos-url-secret"
	keyPrefix = "seckill"
	group     = orderbackend.DefaultGroup
)

// activity is the one activity a scenario sells: open from a minute ago for an hour.
type activity struct {
	id           string
	stock, limit int64
	start, end   time.Time
	buckets      int // the stock split over this many buckets (activity { buckets }); 0 for none
}

func newActivity(id string, stock, limit int64) activity {
	now := time.Now().Truncate(time.Second)
	return activity{id: id, stock: stock, limit: limit, start: now.Add(-time.Minute), end: now.Add(time.Hour)}
}

// topology is the Redis deployment a scenario runs on.
type topology int

const (
	single   topology = iota // one redis-server
	cluster                  // three masters, three replicas (testsrv.StartCluster)
	sentinel                 // master, replica, three sentinels (testsrv.StartSentinel)
)

func (tp topology) String() string { return [...]string{"single", "cluster", "sentinel"}[tp] }

// env is one scenario's private deployment: Redis, PostgreSQL, the gateways and order backends it
// starts, and the test's own view of Redis and the database.
type env struct {
	t    *testing.T
	mode mode
	act  activity
	dir  string

	topo     topology
	redis    *testsrv.Redis    // single
	cluster  *testsrv.Cluster  // cluster
	sentinel *testsrv.Sentinel // sentinel
	pg       *testsrv.Postgres
	dsn      string

	// storeOptions are extra lines for the gateways' `store redis` block; seckillOptions extra
	// lines of their `seckill` block.
	storeOptions, seckillOptions string

	rdb   redis.UniversalClient  // raw commands: INFO, XPENDING, XINFO
	store *redisstore.Store      // what Reconcile reads
	repo  *orderbackend.Postgres // opened on first use (the backends migrate the database)

	// replicationLost are reservations answered 202 that a failover lost the way asynchronous
	// replication may (see replicationTail): verify reports them instead of failing on them.
	replicationLost map[string]bool
}

// newEnv starts redis-server (AOF, appendfsync everysec) and PostgreSQL for act.
func newEnv(t *testing.T, act activity) *env { return newEnvOn(t, act, single) }

// newEnvOn starts Redis in the given topology (every server with AOF, appendfsync everysec) and
// PostgreSQL for act.
func newEnvOn(t *testing.T, act activity, topo topology) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("the chaos suite builds and runs real servers")
	}
	bins.build(t)
	e := &env{t: t, mode: currentMode(), act: act, dir: t.TempDir(), topo: topo}
	aof := testsrv.WithAOF("everysec")
	switch topo {
	case single:
		e.redis = testsrv.StartRedis(t, aof)
		e.onFailure("redis-server", filepath.Join(e.redis.Dir, "redis.log"))
	case cluster:
		e.cluster = testsrv.StartCluster(t, testsrv.WithNodeOptions(aof))
		for i, n := range e.cluster.Nodes {
			e.onFailure(fmt.Sprintf("redis node %d (%s)", i, n.Addr), filepath.Join(n.Dir, "redis.log"))
		}
	case sentinel:
		e.sentinel = testsrv.StartSentinel(t, testsrv.WithServerOptions(aof))
		for i, n := range append(append([]*testsrv.Redis(nil), e.sentinel.Servers...), e.sentinel.Sentinels...) {
			e.onFailure(fmt.Sprintf("redis %d (%s)", i, n.Addr), filepath.Join(n.Dir, "redis.log"))
		}
	}
	e.pg = testsrv.StartPostgres(t)
	e.onFailure("postgres", filepath.Join(e.pg.Dir, "postgres.log"))
	e.dsn = e.pg.Database(t, "orders")

	// The test's own clients go through redisclient too: they must find a promoted master.
	e.rdb = redisclient.New(e.clientOptions(&redis.UniversalOptions{DialTimeout: time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1}))
	t.Cleanup(func() { _ = e.rdb.Close() })
	e.openStore()
	t.Logf("mode full=%v: redis %s %v, postgres port %d", e.mode.full, topo, e.redisAddrs(), e.pg.Port)
	return e
}

// openStore opens the test's own redisstore.Store.
func (e *env) openStore() {
	e.t.Helper()
	store, err := redisstore.New(redisclient.New(e.clientOptions(&redis.UniversalOptions{})),
		redisstore.Options{KeyPrefix: keyPrefix})
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = store
	e.t.Cleanup(func() { _ = store.Close() })
}

// redisAddrs are the addresses a client is given: the server, the cluster's nodes or the
// sentinels.
func (e *env) redisAddrs() []string {
	switch e.topo {
	case cluster:
		return e.cluster.Addrs()
	case sentinel:
		return e.sentinel.Addrs()
	}
	return []string{e.redis.Addr}
}

// clientOptions fills in o's addresses and mode for the topology.
func (e *env) clientOptions(o *redis.UniversalOptions) *redis.UniversalOptions {
	o.Addrs = e.redisAddrs()
	switch e.topo {
	case cluster:
		o.IsClusterMode = true
	case sentinel:
		o.MasterName = testsrv.SentinelMaster
	}
	return o
}

// storeLines is the topology's part of the gateways' `store redis` block.
func (e *env) storeLines() string {
	opts := e.storeOptions
	switch e.topo {
	case cluster:
		return "cluster\n\t\t\t" + opts
	case sentinel:
		return "sentinel " + testsrv.SentinelMaster + "\n\t\t\t" + opts
	}
	return opts
}

// onFailure prints the end of a log when the test has failed. Registered after the server that
// writes it, it runs before that server's cleanup removes it.
func (e *env) onFailure(name, path string) {
	e.t.Cleanup(func() {
		if e.t.Failed() {
			e.t.Logf("--- last lines of %s (%s):\n%s", name, path, proc.Tail(path, 40))
		}
	})
}

// server is a process the test started from a built binary, with its output in a log file; it
// may be killed and started again.
type server struct {
	t    *testing.T
	name string
	bin  string
	args []string
	env  []string
	dir  string
	log  string

	mu   sync.Mutex
	proc *proc.Proc // the current process
}

func (e *env) newServer(name, bin string, args, env []string) *server {
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	p := &server{t: e.t, name: name, bin: bin, args: args, dir: dir, log: filepath.Join(dir, name+".log"),
		// HOME and XDG folders inside the test's folder: Caddy writes nothing into the real home.
		env: append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
			"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data")}, env...)}
	e.t.Cleanup(p.stop)
	e.onFailure(name, p.log)
	p.start()
	return p
}

// start runs the process (again, after a kill: same arguments, same log, appended).
func (p *server) start() {
	p.t.Helper()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // the child holds its own descriptor
	fmt.Fprintf(f, "=== %s start %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = p.dir, p.env, f, f
	pr, err := proc.Start(cmd)
	if err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.proc = pr
	p.mu.Unlock()
}

func (p *server) current() *proc.Proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.proc
}

// exited reports whether the current process has exited.
func (p *server) exited() bool { return p.current().Exited() }

// failIfExited ends the test when the process has exited: a wait for it to be ready would only
// time out. onFailure prints the end of its log.
func (p *server) failIfExited() {
	p.t.Helper()
	if p.exited() {
		p.t.Fatalf("%s exited at start", p.name)
	}
}

// signal sends sig to the current process (SIGSTOP and SIGCONT to pause it); a process that
// has exited already is left alone.
func (p *server) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := syscall.Kill(p.current().Pid(), sig); err != nil && !p.exited() {
		p.t.Fatalf("signal %s to %s: %v", sig, p.name, err)
	}
}

// kill sends SIGKILL, as a crash would, and waits until the process is gone.
func (p *server) kill() { p.current().Kill() }

// stop asks the process to exit (SIGTERM) and kills it after 10 s; safe to call when it is gone.
func (p *server) stop() { p.current().Stop(10 * time.Second) }

// gateway is a Caddy process running the seckill edge on the shared Redis.
type gateway struct {
	*server
	base     string // http://127.0.0.1:port
	activity string
}

// startGateway writes the gateway's Caddyfile and runs Caddy until the activity's status answers.
func (e *env) startGateway(name string) *gateway { return e.startGatewayCaptcha(name, "off") }

// startGatewayCaptcha is startGateway with `captcha on` or `captcha off`.
func (e *env) startGatewayCaptcha(name, captcha string) *gateway {
	e.t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(e.caddyfile(port, captcha)), 0o600); err != nil {
		e.t.Fatal(err)
	}
	g := &gateway{base: fmt.Sprintf("http://127.0.0.1:%d", port), activity: e.act.id}
	g.server = e.newServer(name, bins.caddy, []string{"run", "--config", cfg, "--adapter", "caddyfile"}, nil)
	g.waitReady()
	return g
}

// caddyfile is the edge only: store redis, captcha off (a program buys; "on" for a gateway that
// only issues captchas), JWT HS256, no rate limits (the suite is about the store and the
// backends, not the node-local limiters), the activity, and the metrics handler to read the
// breaker state. No embedded order backend.
func (e *env) caddyfile(port int, captcha string) string {
	a := e.act
	return fmt.Sprintf(`{
	admin off
	persist_config off
	seckill {
		store redis %s {
			%s
		}
		%s
		jwt {
			algorithms HS256
			hmac_secret %s
		}
		url_secret %s
		captcha %s
		activity %s {
			stock %d
			limit %d
			start %s
			end %s
			pay_within 15m%s
		}%s
	}
}

http://:%d {
	bind 127.0.0.1
	route /seckill/* {
		seckill
	}
	metrics /metrics
}
`, strings.Join(e.redisAddrs(), " "), e.storeLines(), e.seckillOptions, jwtSecret, urlSecret, captcha, a.id, a.stock, a.limit,
		a.start.UTC().Format(time.RFC3339), a.end.UTC().Format(time.RFC3339), bucketsLine(a), captchaActivity(captcha, a), port)
}

// bucketsLine is the activity block's buckets option, when the activity is split.
func bucketsLine(a activity) string {
	if a.buckets < 2 {
		return ""
	}
	return fmt.Sprintf("\n\t\t\tbuckets %d", a.buckets)
}

// captchaActivity is, for a gateway with captcha on, a second activity that nobody buys, so that
// its captchas are issued whatever the sale's sold-out flag says.
func captchaActivity(captcha string, a activity) string {
	if captcha != "on" {
		return ""
	}
	return fmt.Sprintf(`
		activity %s-captcha {
			stock 1
			start %s
			end %s
		}`, a.id, a.start.UTC().Format(time.RFC3339), a.end.UTC().Format(time.RFC3339))
}

// restart starts a killed gateway again with the same configuration.
func (g *gateway) restart() {
	g.t.Helper()
	g.start()
	g.waitReady()
}

// waitReady waits until the activity's status answers 200. A failure needs no log here: the
// process's onFailure prints the end of its log.
func (g *gateway) waitReady() {
	g.t.Helper()
	hc := &http.Client{Timeout: time.Second}
	waitFor(g.t, g.name+" answering on "+g.base, time.Minute, func() bool {
		g.failIfExited()
		res, err := hc.Get(g.base + "/seckill/" + g.activity)
		if err != nil {
			return false
		}
		_ = res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

// breakerState reads caddy_seckill_breaker_state (0 closed, 1 half-open, 2 open) from the
// gateway's metrics, which cost no store call.
func (g *gateway) breakerState() (int, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	res, err := hc.Get(g.base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer func() { _ = res.Body.Close() }()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "caddy_seckill_breaker_state "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("no caddy_seckill_breaker_state in the metrics of %s (%w)", g.name, sc.Err())
}

// breakerOpen is the metric's value for an open breaker.
const breakerOpen = 2

// watchBreaker polls g's breaker until stop is closed and reports whether it was ever open.
func (g *gateway) watchBreaker(stop <-chan struct{}) <-chan bool {
	seen := make(chan bool, 1)
	go func() {
		open := false
		for {
			if s, err := g.breakerState(); err == nil && s == breakerOpen {
				open = true
			}
			select {
			case <-stop:
				seen <- open
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return seen
}

// backend is a standalone order backend process.
type backend struct {
	*server
	consumer string
	listen   string
}

// startBackend runs `orderbackend run` as consumer name and waits until it reads the activity's
// queue. claimIdle is how long another consumer's entry must sit pending before it is claimed.
func (e *env) startBackend(name string, claimIdle time.Duration) *backend {
	e.t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	b := &backend{consumer: name, listen: fmt.Sprintf("127.0.0.1:%d", port)}
	args := []string{"run", "-redis", strings.Join(e.redisAddrs(), ","), "-db", e.dsn,
		"-listen", b.listen, "-name", name, "-claim-idle", claimIdle.String()}
	if e.topo == sentinel {
		args = append(args, "-redis-sentinel", testsrv.SentinelMaster)
	}
	b.server = e.newServer(name, bins.orderbackend, args,
		[]string{"SECKILL_JWT_SECRET=" + jwtSecret})
	e.waitConsumer(b)
	return b
}

// restart starts a killed backend again under the same consumer name.
func (e *env) restartBackend(b *backend) {
	e.t.Helper()
	b.start()
	e.waitListening(b)
}

// waitConsumer waits until b is a member of the activity's consumer group (it has read).
func (e *env) waitConsumer(b *backend) {
	e.t.Helper()
	waitFor(e.t, b.name+" joining the consumer group", time.Minute, func() bool {
		b.failIfExited()
		// A split activity's consumer reads every bucket's stream: the first one shows it joined.
		cs, _ := e.rdb.XInfoConsumers(context.Background(), e.streamKeys()[0], group).Result() // NOGROUP until the first read
		for _, c := range cs {
			if c.Name == b.consumer {
				return true
			}
		}
		return false
	})
}

// waitListening waits until a restarted b accepts connections on its HTTP address.
func (e *env) waitListening(b *backend) {
	e.t.Helper()
	waitFor(e.t, b.name+" listening on "+b.listen, time.Minute, func() bool {
		b.failIfExited()
		c, err := net.DialTimeout("tcp", b.listen, time.Second)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	})
}

// streamKey is the activity's wins queue (docs/admission.md).
func (e *env) streamKey() string { return keyPrefix + ":{" + e.act.id + "}:orders" }

// bucketKey is the wins queue of bucket i of a split activity: each bucket is a complete key set
// under its own hash tag (docs/admission.md, "Stock buckets").
func (e *env) bucketKey(i int) string {
	return fmt.Sprintf("%s:{%s#%d/%d}:orders", keyPrefix, e.act.id, i, e.act.buckets)
}

// streamKeys are the activity's wins queues: one, or one per bucket.
func (e *env) streamKeys() []string {
	if e.act.buckets < 2 {
		return []string{e.streamKey()}
	}
	keys := make([]string, e.act.buckets)
	for i := range keys {
		keys[i] = e.bucketKey(i)
	}
	return keys
}

// entryOf is the stream and the entry id of a reservation: a split activity's reservation is
// its bucket's entry id with "." and the bucket appended.
func (e *env) entryOf(resv string) (stream, id string) {
	if e.act.buckets < 2 {
		return e.streamKey(), resv
	}
	raw, b, ok := strings.Cut(resv, ".")
	i, err := strconv.Atoi(b)
	if !ok || err != nil || i < 0 || i >= e.act.buckets {
		e.t.Fatalf("reservation %q names no bucket of %d", resv, e.act.buckets)
	}
	return e.bucketKey(i), raw
}

// replicationWindow bounds how long before a fault a win answered 202 may have been made and still
// be lost by the failover as asynchronous replication loses writes: the replica of a healthy
// master on loopback is a few milliseconds behind at most, even on this loaded 2-core machine.
const replicationWindow = 50 * time.Millisecond

// replicationTail splits the wins missing from the new master's queue into those asynchronous
// replication may lose without replicas_ack (docs/failover.md, "Losses per durability setting")
// and the others. The replica receives a prefix of the master's writes, so a win it lacks may
// only be newer, in its queue, than every acknowledged win it has, and made within
// replicationWindow of the fault; a win missing before a present one, or older, is a hole no
// replication lag explains.
func (e *env) replicationTail(acked map[userKey]string, missing []string, fault time.Time) (tail, holes []string) {
	isMissing := map[string]bool{}
	for _, m := range missing {
		isMissing[m] = true
	}
	newest := map[string][3]uint64{} // stream → the newest acknowledged win present on the new master
	for _, resv := range acked {
		if isMissing[resv] {
			continue
		}
		stream, _ := e.entryOf(resv)
		if k, ok := winOrder(resv); ok && less(newest[stream], k) {
			newest[stream] = k
		}
	}
	for _, m := range missing {
		stream, _ := e.entryOf(m)
		k, ok := winOrder(m)
		if ok && less(newest[stream], k) && fault.Sub(time.UnixMilli(int64(k[0]))) <= replicationWindow {
			tail = append(tail, m)
		} else {
			holes = append(holes, m)
		}
	}
	return tail, holes
}

// winOrder is a reservation's place in its queue: the entry id's milliseconds and sequence, and
// the win's number in its entry ("ms-seq-k", a bucket's ".b" cut off).
func winOrder(resv string) ([3]uint64, bool) {
	resv, _, _ = strings.Cut(resv, ".")
	parts := strings.Split(resv, "-")
	if len(parts) != 3 {
		return [3]uint64{}, false
	}
	var k [3]uint64
	for i, p := range parts {
		v, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return [3]uint64{}, false
		}
		k[i] = v
	}
	return k, true
}

func less(a, b [3]uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

// missingFromStream returns the reservations among wins that are not wins of the activity's
// queue: a reservation id "E-k" is win k of queue entry E (docs/admission.md).
func (e *env) missingFromStream(wins map[userKey]string) []string {
	e.t.Helper()
	var missing []string
	for _, resv := range wins {
		stream, id := e.entryOf(resv)
		if !e.winInStream(stream, id) {
			missing = append(missing, resv)
		}
	}
	return missing
}

// redisInfo reads one INFO section as key → value.
func (e *env) redisInfo(section string) (map[string]string, error) {
	s, err := e.rdb.Info(context.Background(), section).Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// scriptCalls is how many scripts Redis has run (EVALSHA and EVAL), from INFO commandstats.
func (e *env) scriptCalls() int64 {
	e.t.Helper()
	m, err := e.redisInfo("commandstats")
	if err != nil {
		e.t.Fatalf("INFO commandstats: %v", err)
	}
	var n int64
	for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
		for _, f := range strings.Split(m[cmd], ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// settledScriptCalls waits until Redis has run what was queued in its sockets (the script count
// stops moving) and returns the count.
func (e *env) settledScriptCalls() int64 {
	e.t.Helper()
	last, same := e.scriptCalls(), 0
	for deadline := time.Now().Add(10 * time.Second); same < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		n := e.scriptCalls()
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last
}

// queued is the length of the activity's wins queue in wins: the wins ever queued.
func (e *env) queued() int64 {
	e.t.Helper()
	return e.queuedWins()
}

// remaining is the activity's stock left in the store.
func (e *env) remaining() int64 {
	e.t.Helper()
	n, err := e.store.Remaining(context.Background(), e.act.id)
	if err != nil {
		e.t.Fatalf("remaining: %v", err)
	}
	return n
}

// redisPID is redis-server's process id, from INFO server.
func (e *env) redisPID() int {
	e.t.Helper()
	m, err := e.redisInfo("server")
	if err != nil {
		e.t.Fatalf("INFO server: %v", err)
	}
	pid, err := strconv.Atoi(m["process_id"])
	if err != nil {
		e.t.Fatalf("INFO server process_id %q: %v", m["process_id"], err)
	}
	return pid
}

// backlog is the consumer group's work left, in wins counted from the raw stream (backlogWins):
// delivered but not acknowledged, and not delivered yet.
func (e *env) backlog() (pending, lag int64, err error) {
	return e.backlogWins()
}

// pendingOf is how many wins consumer holds delivered and not acknowledged (pendingWins).
func (e *env) pendingOf(consumer string) (int64, error) {
	held, _, err := e.pendingWins(consumer)
	return held, err
}

// waitFor polls cond every 20 ms until it holds or timeout passes, and returns how long it took.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !cond() {
		if time.Since(began) > timeout {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(began)
}

// orders opens the order repository (once) for the checks.
func (e *env) orders() *orderbackend.Postgres {
	e.t.Helper()
	if e.repo == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		repo, err := orderbackend.NewPostgres(ctx, e.dsn)
		if err != nil {
			e.t.Fatalf("open the order database: %v", err)
		}
		e.repo = repo
		e.t.Cleanup(func() { _ = repo.Close() })
	}
	return e.repo
}

// reconcile polls orderbackend.Reconcile until every invariant holds (the queue drained and the
// outbox relayed) or the mode's drain time passes, and returns the report and how long it took.
func (e *env) reconcile() (orderbackend.Report, time.Duration) {
	e.t.Helper()
	repo := e.orders()
	began := time.Now()
	var (
		rep     orderbackend.Report
		lastErr error
	)
	for time.Since(began) < e.mode.drain {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rep, lastErr = orderbackend.Reconcile(ctx, e.store, repo, e.act.id)
		cancel()
		if lastErr == nil && rep.OK() {
			return rep, time.Since(began)
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("reconcile did not pass within %s (error %v):\n%s", e.mode.drain, lastErr, rep)
	return rep, 0
}

// verify is the end of every sale scenario: reconcile passes, and from the buyers' side no win
// was lost, no Idempotency-Key was admitted twice, nothing was oversold, and every refusal kept to
// the contract. It returns the reconcile report and how long the queue took to drain.
func (e *env) verify(d *driver) (orderbackend.Report, time.Duration) {
	e.t.Helper()
	t := e.t
	d.checkAnswers()
	rep, drained := e.reconcile()
	if rep.DeadLetters != 0 {
		t.Errorf("%d wins were dead-lettered: their buyers got a 202 and no order", rep.DeadLetters)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	orders, err := e.orders().Orders(ctx, e.act.id)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	told := checkOrders(t, e.act, d, orders, e.replicationLost)
	t.Logf("reconcile OK after %s: wins %d, orders %d, store remaining %d, database left %d, buyers told %d",
		drained.Round(time.Millisecond), rep.Wins, rep.Orders, rep.StoreRemaining, rep.DBLeft, told)
	return rep, drained
}

// checkOrders holds the promises from the buyers' side against the orders of the sale: nothing
// oversold, no user above the limit, every reservation answered in a 202 exactly one order of
// that buyer, no Idempotency-Key admitted twice, and (once every buyer finished) every order
// announced to its buyer in a 202. It returns how many buy intents were told of a win. A
// reservation in replicationLost (a Redis failover without replicas_ack lost it, see
// replicationTail) is reported rather than failed.
func checkOrders(t *testing.T, act activity, d *driver, orders []orderbackend.Order, replicationLost map[string]bool) int {
	t.Helper()
	byResv := map[string]orderbackend.Order{}
	perUser := map[string]int64{}
	ordersOf := map[string]int{}
	var sold int64
	for _, o := range orders {
		if _, dup := byResv[o.ReservationID]; dup {
			t.Errorf("reservation %s has two orders", o.ReservationID)
		}
		byResv[o.ReservationID] = o
		if o.Status != orderbackend.StatusCancelled {
			perUser[o.User] += o.Qty
			ordersOf[o.User]++
			sold += o.Qty
		}
	}
	if sold > act.stock {
		t.Errorf("oversold: %d items in orders, stock %d", sold, act.stock)
	}
	for u, q := range perUser {
		if q > act.limit {
			t.Errorf("oversold: user %s holds %d items, limit %d", u, q, act.limit)
		}
	}

	// Never lose a win: every reservation a buyer was told of is one order of that buyer.
	wins := d.wins() // (user, key) → reservation, from the 202 answers
	told := map[string]bool{}
	for k, resv := range wins {
		told[resv] = true
		o, ok := byResv[resv]
		switch {
		case !ok && replicationLost[resv]:
			t.Logf("win lost to asynchronous replication (no replicas_ack; docs/failover.md): %s got 202 with reservation %s (key %s) and there is no order", k.user, resv, k.key)
		case !ok:
			t.Errorf("lost win: %s got 202 with reservation %s (key %s) and there is no order", k.user, resv, k.key)
		case o.User != k.user:
			t.Errorf("reservation %s was answered to %s but its order belongs to %s", resv, k.user, o.User)
		}
	}
	// No double admission: each buyer used one Idempotency-Key, so one order at most, whatever the
	// limit; and every order reached its buyer as a 202 (a win nobody was told of means a retry
	// with the same key did not get the first answer back).
	keys := d.keysPerUser()
	for u, n := range ordersOf {
		if n > keys[u] {
			t.Errorf("double admission: user %s has %d orders for %d Idempotency-Keys", u, n, keys[u])
		}
	}
	if d.allFinished() {
		for _, o := range orders {
			if !told[o.ReservationID] {
				t.Errorf("win never answered: reservation %s of %s is an order, but no 202 carried it", o.ReservationID, o.User)
			}
		}
	}
	return len(wins)
}

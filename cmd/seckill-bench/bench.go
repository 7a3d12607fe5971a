package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// bench is one run: the gateway, the users, and everything measured.
type bench struct {
	cfg    config
	out    io.Writer
	env    *environment
	cl     *client
	users  *users
	rec    *recorder
	watch  *procWatch
	orders bool // an order backend turns wins into orders: winners poll until theirs exists
	prof   *profiler

	done    [nTargets]atomic.Int64 // users finished in the current phase (progress)
	wins    atomic.Int64           // 202s of the sale
	lastWin []atomic.Int64         // per activity: nanoseconds from the run's start to its last 202
	opened  atomic.Int64           // nanoseconds from the run's start to the first possible press
	active  atomic.Pointer[activeStep]
}

// activeStep is what the progress line reports on.
type activeStep struct {
	p *phase
	t target
}

func (b *bench) setActive(p *phase, t target) { b.active.Store(&activeStep{p, t}) }

// noteWin records when activity a last sold an item.
func (b *bench) noteWin(a int, at time.Time) {
	ns := int64(at.Sub(b.rec.start))
	for {
		old := b.lastWin[a].Load()
		if ns <= old || b.lastWin[a].CompareAndSwap(old, ns) {
			return
		}
	}
}

// run is the whole bench: set up, mint, sell, soak, check, report. It returns the exit status.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) int {
	if err := cfg.validate(); err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
		return exitUsage
	}
	env, err := setup(ctx, &cfg, stderr)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
		return exitError
	}
	ok := false
	defer func() {
		if err := env.close(ok); err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
		}
		if !env.removeDir || !ok {
			_, _ = fmt.Fprintln(stderr, "seckill-bench: work directory (config, logs):", env.dir)
		}
	}()

	b := &bench{
		cfg: cfg, out: stdout, env: env,
		cl:      newClient(env.base, max(cfg.concurrency, cfg.maxInflight), cfg.timeout),
		rec:     newRecorder(cfg.window),
		watch:   env.watch(&cfg),
		orders:  env.orders != nil || env.ordersDB != "" || env.embedded,
		lastWin: make([]atomic.Int64, cfg.activities),
	}
	defer b.cl.close()
	if cfg.pprof != "" {
		if env.admin == "" {
			_, _ = fmt.Fprintln(stderr, "seckill-bench: -pprof needs the gateway's admin endpoint (-admin)")
			return exitUsage
		}
		if err := os.MkdirAll(cfg.pprof, 0o755); err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
			return exitError
		}
		b.prof = &profiler{admin: env.admin, orders: env.ordersOps, dir: cfg.pprof, seconds: cfg.pprofD, trace: cfg.trace, out: stdout}
	}

	_, _ = fmt.Fprintf(stdout, "seckill-bench: %s, %d users, %d activities × %d items, limit %d, store %s, orders %s, gateway %s\n",
		cfg.scenario, cfg.users, cfg.activities, cfg.stock, cfg.limit, cfg.store, cfg.orders, env.base)
	mintStart := time.Now()
	b.users, err = mintUsers(ctx, cfg.users, cfg.activityIDs(), []byte(cfg.jwtSecret), cfg.tokenTTL, func(n int) {
		if !cfg.quiet {
			_, _ = fmt.Fprintf(stdout, "minting tokens: %d/%d\n", n, cfg.users)
		}
	})
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
		return exitError
	}
	_, _ = fmt.Fprintf(stdout, "minted %d tokens in %s\n", cfg.users, time.Since(mintStart).Round(time.Millisecond))

	if err := b.checkFresh(ctx); err != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
		return exitError
	}
	b.warmUp(ctx)
	metricsBefore, _ := scrapeMetrics(ctx, env.admin)

	b.rec = newRecorder(cfg.window) // the clock of the run starts now, not before minting
	stopProgress := b.startProgress()
	err = b.sale(ctx)
	if err == nil {
		b.soak(ctx)
	}
	stopProgress()
	b.prof.wait()
	b.prof.heap(ctx)
	if err != nil || ctx.Err() != nil {
		_, _ = fmt.Fprintln(stderr, "seckill-bench: run interrupted:", firstErr(err, ctx.Err()))
		return exitError
	}

	metricsAfter, metricsErr := scrapeMetrics(ctx, env.admin)
	checks := b.checkInvariants(ctx)
	recon, reconErr := b.reconcile(ctx)
	rep := b.report(metricsBefore, metricsAfter, metricsErr, checks, recon, reconErr)
	rep.print(stdout)
	if cfg.jsonOut != "" {
		if err := writeJSONFile(cfg.jsonOut, rep); err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
			return exitError
		}
		_, _ = fmt.Fprintln(stdout, "JSON report:", cfg.jsonOut)
	}
	if cfg.svgOut != "" {
		if err := writeChartFile(cfg.svgOut, b.rec, rep.Title); err != nil {
			_, _ = fmt.Fprintln(stderr, "seckill-bench:", err)
			return exitError
		}
		_, _ = fmt.Fprintln(stdout, "latency chart:", cfg.svgOut)
	}
	if !rep.OK {
		_, _ = fmt.Fprintln(stdout, "RESULT: INVARIANT VIOLATED")
		return exitViolation
	}
	_, _ = fmt.Fprintln(stdout, "RESULT: every invariant holds")
	ok = true
	return exitOK
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// checkFresh refuses a gateway whose activities are not the bench's, untouched: the invariant
// checks compare what the bench saw with what the gateway holds.
func (b *bench) checkFresh(ctx context.Context) error {
	for _, id := range b.users.acts {
		a := b.cl.do(ctx, request{method: http.MethodGet, path: b.cfg.prefix + "/" + id, user: -1})
		switch {
		case a.Err != nil:
			return fmt.Errorf("status of %s: %w", id, a.Err)
		case a.Status != http.StatusOK:
			return fmt.Errorf("status of %s: HTTP %d %s (is the gateway configured with the bench's activities? see gateway-config)", id, a.Status, a.Code)
		case a.Remaining != b.cfg.stock:
			return fmt.Errorf("activity %s has %d items left, want %d: the bench needs a fresh sale", id, a.Remaining, b.cfg.stock)
		}
	}
	return nil
}

// warmUp opens the client's connections (and wakes the gateway's goroutines) with requests to the
// respond route, unmeasured, so that the first measured target does not pay for the handshakes
// the second one reuses.
func (b *bench) warmUp(ctx context.Context) {
	conns := b.cfg.concurrency
	if b.cfg.scenario != "closed" {
		conns = max(conns, b.cfg.maxInflight)
	}
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.cl.do(ctx, request{method: http.MethodGet, path: b.cfg.baselinePath + "/warm-up", user: -1})
		}()
	}
	wg.Wait()
}

// startInstant returns the burst's start instant. A gateway the bench started gets its activities
// moved to start in a moment, through the admin API (they were configured to start tomorrow, with
// the path revealed, so every user could fetch its path first); a given gateway's start is read
// from the status call.
func (b *bench) startInstant(ctx context.Context) (time.Time, error) {
	if b.env.started {
		t0 := time.Now().Add(time.Second).Truncate(time.Millisecond)
		for _, a := range b.env.spec.Activities {
			body, _ := json.Marshal(map[string]any{
				"stock": a.Stock, "limit": a.Limit, "start": t0, "end": a.End, "pay_within": "15m",
			})
			req, err := http.NewRequestWithContext(ctx, http.MethodPut, b.env.admin+"/seckill/activities/"+a.ID, bytes.NewReader(body))
			if err != nil {
				return time.Time{}, err
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return time.Time{}, fmt.Errorf("move the start of %s through the admin API: %w", a.ID, err)
			}
			msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return time.Time{}, fmt.Errorf("move the start of %s through the admin API: HTTP %d: %s", a.ID, resp.StatusCode, bytes.TrimSpace(msg))
			}
		}
		return t0, nil
	}
	var t0 time.Time
	for _, id := range b.users.acts {
		a := b.cl.do(ctx, request{method: http.MethodGet, path: b.cfg.prefix + "/" + id, user: -1})
		if a.Status != http.StatusOK {
			return time.Time{}, statusError("status of "+id, a)
		}
		if s := time.UnixMilli(a.StartMS); s.After(t0) {
			t0 = s
		}
	}
	if now := time.Now(); t0.Before(now) {
		_, _ = fmt.Fprintln(b.out, "warning: the activities had already started when every path was revealed; the burst starts now")
		t0 = now
	}
	return t0, nil
}

func writeJSONFile(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the JSON report: %w", err)
	}
	if err := writeFile(path, append(data, '\n')); err != nil {
		return fmt.Errorf("write the JSON report: %w", err)
	}
	return nil
}

package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// Report is the JSON report of a run; the terminal table prints the same figures. Funnel is the
// gateway's refusals by layer during the run, in funnel order, then the admitted buys; Metrics is
// every caddy_seckill_ series as the run changed it; FunnelErr says why neither could be read.
type Report struct {
	Title        string                `json:"title"`
	Started      time.Time             `json:"started"`
	Machine      machineInfo           `json:"machine"`
	Config       reportConfig          `json:"config"`
	Phases       []phaseReport         `json:"phases"`
	Ratios       []ratio               `json:"ratios"`
	Selling      *sellingInfo          `json:"selling,omitempty"`
	Soak         *soakInfo             `json:"soak,omitempty"`
	Funnel       []funnelLayer         `json:"funnel,omitempty"`
	Metrics      []metricLine          `json:"gateway_metrics,omitempty"`
	FunnelErr    string                `json:"funnel_error,omitempty"`
	Processes    []processInfo         `json:"processes,omitempty"`
	Windows      []windowReport        `json:"windows,omitempty"`
	Checks       []check               `json:"invariants"`
	Reconcile    []orderbackend.Report `json:"reconcile,omitempty"`
	ReconcileErr string                `json:"reconcile_error,omitempty"`
	OK           bool                  `json:"ok"`
}

type machineInfo struct {
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	LoadAvg  string `json:"loadavg_at_end,omitempty"`
	Go       string `json:"go"`
	OS       string `json:"os"`
}

// The gateway memory goal: under memoryGoalMB of peak RSS once memoryGoalUsers distinct users
// and addresses have passed the limiters.
const (
	memoryGoalUsers = 1_000_000
	memoryGoalMB    = 200
)

type reportConfig struct {
	Scenario    string  `json:"scenario"`
	Users       int     `json:"users"`
	Activities  int     `json:"activities"`
	Stock       int64   `json:"stock_per_activity"`
	Limit       int64   `json:"limit"`
	Buckets     int     `json:"buckets,omitempty"`
	Concurrency int     `json:"concurrency"`
	Rate        float64 `json:"rate,omitempty"`
	MaxInflight int     `json:"max_inflight"`
	Soak        string  `json:"soak"`
	Store       string  `json:"store"`
	Orders      bool    `json:"order_backend"`
	IPRate      string  `json:"ip_rate"`
	UserRate    string  `json:"user_rate"`
}

type phaseReport struct {
	Name    string         `json:"name"`
	Targets []targetReport `json:"targets"`
}

type targetReport struct {
	Target       string             `json:"target"`
	Seconds      float64            `json:"seconds"`
	Requests     int64              `json:"requests"`
	RPS          float64            `json:"requests_per_second"`
	Errors       int64              `json:"errors"`
	ErrorRate    float64            `json:"error_rate"`
	Latency      latency            `json:"latency"`
	Calls        map[string]latency `json:"calls"`
	Answers      []answerReport     `json:"answers"`
	GatewayCores float64            `json:"gateway_cores"`
	HelperCores  float64            `json:"helper_cores,omitempty"`
	BenchCores   float64            `json:"bench_cores"`
	// CPUWait is the share of the time some runnable task on the machine waited for a core
	// (Linux PSI, /proc/pressure/cpu "some"); absent where the kernel does not report it.
	CPUWait *float64 `json:"cpu_wait,omitempty"`
}

// latency is a histogram summary, in milliseconds.
type latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
}

type answerReport struct {
	Call   string `json:"call"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Count  int64  `json:"count"`
}

// windowReport is one -window of the run, as the chart draws it: the answers recorded in it, by
// target, with their latencies (from the intended send time) and the active target. A stall shows
// as a window whose max is far above its p50, or as a window with few requests.
type windowReport struct {
	AtMS    float64                 `json:"at_ms"` // the window's start, from the run's start
	Targets map[string]windowTarget `json:"targets"`
}

type windowTarget struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors,omitempty"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	Max      float64 `json:"max_ms"`
}

// windowReports lists the recorded windows up to the last one with an answer.
func (b *bench) windowReports() []windowReport {
	ws := b.rec.windowList()
	last := -1
	for i, w := range ws {
		for t := range w.requests {
			if w.requests[t].Load() > 0 {
				last = i
			}
		}
	}
	out := make([]windowReport, 0, last+1)
	for i := 0; i <= last; i++ {
		w := ws[i]
		wr := windowReport{AtMS: ms(time.Duration(i) * b.rec.windowSize), Targets: map[string]windowTarget{}}
		for t := target(0); t < nTargets; t++ {
			n := w.requests[t].Load()
			if n == 0 {
				continue
			}
			h := w.lat[t]
			wr.Targets[t.String()] = windowTarget{
				Requests: n, Errors: w.errors[t].Load(),
				P50: ms(h.Quantile(0.5)), P99: ms(h.Quantile(0.99)), Max: ms(h.Max()),
			}
		}
		out = append(out, wr)
	}
	return out
}

// ratio compares one figure of the seckill handler with the same figure of respond.
type ratio struct {
	Name    string  `json:"name"`
	Seckill float64 `json:"seckill"`
	Respond float64 `json:"respond"`
	Ratio   float64 `json:"ratio"`
	Goal    string  `json:"goal,omitempty"`
	Met     *bool   `json:"met,omitempty"`
}

type sellingInfo struct {
	Wins          int64   `json:"wins"`
	SellingS      float64 `json:"selling_s"` // gateway time from the opening to the sell-out
	WinsPerSecond float64 `json:"wins_per_second"`
}

// soakInfo is how much traffic the gateway took after the sell-out: the soak is at least
// ten times the stock, for minutes.
type soakInfo struct {
	Presses    int64   `json:"presses"` // buy presses sent to the gateway during the soak
	Seconds    float64 `json:"seconds"` // the gateway's share of the soak
	Stock      int64   `json:"stock"`   // items on sale in all
	TimesStock float64 `json:"times_stock"`
}

type processInfo struct {
	Name       string  `json:"name"`
	PID        int     `json:"pid"`
	RSSMB      float64 `json:"rss_mb_at_end"`
	PeakRSSMB  float64 `json:"peak_rss_mb"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func summarize(h *Histogram) latency {
	return latency{
		Count: h.Count(), Mean: ms(h.Mean()), P50: ms(h.Quantile(0.5)), P90: ms(h.Quantile(0.9)),
		P99: ms(h.Quantile(0.99)), P999: ms(h.Quantile(0.999)), Max: ms(h.Max()),
	}
}

// report assembles the figures of the run.
func (b *bench) report(before, after []series, metricsErr error, checks []check, recon []orderbackend.Report, reconErr error) *Report {
	cfg := b.cfg
	r := &Report{
		Title:   fmt.Sprintf("seckill-bench %s: %d users, %d×%d items, store %s%s", cfg.scenario, cfg.users, cfg.activities, cfg.stock, cfg.store, bucketsTitle(cfg.buckets)),
		Started: b.rec.start,
		Machine: machine(),
		Config: reportConfig{
			Scenario: cfg.scenario, Users: cfg.users, Activities: cfg.activities, Stock: cfg.stock, Limit: cfg.limit, Buckets: cfg.buckets,
			Concurrency: cfg.concurrency, MaxInflight: cfg.maxInflight, Soak: cfg.soak.String(),
			Store: cfg.store, Orders: b.orders, IPRate: cfg.ipRate, UserRate: cfg.userRate,
		},
		Checks: checks, Reconcile: recon,
	}
	if cfg.scenario == "open" {
		r.Config.Rate = cfg.rate
	}
	for _, p := range b.rec.phases {
		pr := phaseReport{Name: p.name}
		for t := target(0); t < nTargets; t++ {
			s := p.targets[t]
			wall := time.Duration(s.active.Load())
			if s.requests.Load() == 0 && s.calls[callFlow].Count() == 0 {
				continue
			}
			tr := targetReport{
				Target: t.String(), Seconds: wall.Seconds(), Requests: s.requests.Load(), Errors: s.errors.Load(),
				Latency: summarize(s.all), Calls: map[string]latency{},
				GatewayCores: cores(s.cpu.Gateway, s.cpu.Wall), HelperCores: cores(s.cpu.Helpers, s.cpu.Wall),
				BenchCores: cores(s.cpu.Bench, s.cpu.Wall),
			}
			if s.cpu.StallWall > 0 {
				w := min(cores(s.cpu.Stall, s.cpu.StallWall), 1)
				tr.CPUWait = &w
			}
			if wall > 0 {
				tr.RPS = float64(tr.Requests) / wall.Seconds()
			}
			if tr.Requests > 0 {
				tr.ErrorRate = float64(tr.Errors) / float64(tr.Requests)
			}
			for c := callKind(0); c < nCalls; c++ {
				if s.calls[c].Count() > 0 {
					tr.Calls[c.String()] = summarize(s.calls[c])
				}
			}
			for _, a := range s.answersSorted() {
				tr.Answers = append(tr.Answers, answerReport{Call: a.Call.String(), Status: a.Status, Code: a.Code, Count: a.N})
			}
			pr.Targets = append(pr.Targets, tr)
		}
		r.Phases = append(r.Phases, pr)
	}
	r.Ratios = b.ratios(r)
	r.Windows = b.windowReports()

	var last int64
	for i := range b.lastWin {
		last = max(last, b.lastWin[i].Load())
	}
	if w := b.wins.Load(); w > 0 {
		// A burst sells at once; a paired sale is interleaved with respond, so its selling time is
		// the gateway's share of the selling sub-phase.
		d := time.Duration(last - b.opened.Load())
		for _, p := range b.rec.phases {
			if p.name == "selling" {
				d = time.Duration(p.targets[gateway].active.Load())
			}
		}
		r.Selling = &sellingInfo{Wins: w, SellingS: d.Seconds()}
		if d > 0 {
			r.Selling.WinsPerSecond = float64(w) / d.Seconds()
		}
	}
	for _, p := range r.Phases {
		for _, t := range p.Targets {
			if p.Name == "soak" && t.Target == gateway.String() && t.Requests > 0 {
				stock := int64(b.cfg.activities) * b.cfg.stock
				r.Soak = &soakInfo{Presses: t.Requests, Seconds: t.Seconds, Stock: stock, TimesStock: float64(t.Requests) / float64(stock)}
			}
		}
	}
	if metricsErr != nil {
		r.FunnelErr = metricsErr.Error()
	} else {
		r.Funnel = funnelLayers(before, after)
		r.Metrics = metricDeltas(before, after)
	}
	procs := b.watch.helpers
	if b.watch.gateway != 0 {
		procs = append([]namedPID{{"gateway", b.watch.gateway}}, procs...)
	}
	for _, p := range procs {
		if u, err := readProc(p.pid); err == nil {
			r.Processes = append(r.Processes, processInfo{
				Name: p.name, PID: p.pid, RSSMB: float64(u.RSS) / (1 << 20), PeakRSSMB: float64(u.PeakRSS) / (1 << 20), CPUSeconds: u.CPU.Seconds(),
			})
		}
	}
	if reconErr != nil {
		r.ReconcileErr = reconErr.Error()
	}
	r.OK = reconErr == nil
	for _, c := range checks {
		r.OK = r.OK && c.OK
	}
	for _, rr := range recon {
		r.OK = r.OK && rr.OK()
	}
	return r
}

// ratios compares the seckill handler with respond: throughput and p99 of the sale and of the
// sold-out path, against the goals of the issue on a 2-core machine.
func (b *bench) ratios(r *Report) []ratio {
	find := func(phase, t string) *targetReport {
		for i := range r.Phases {
			if r.Phases[i].Name != phase {
				continue
			}
			for j := range r.Phases[i].Targets {
				if r.Phases[i].Targets[j].Target == t {
					return &r.Phases[i].Targets[j]
				}
			}
		}
		return nil
	}
	var out []ratio
	add := func(name string, s, rsp float64, goal string, met func(float64) bool) {
		if s == 0 || rsp == 0 {
			return
		}
		x := ratio{Name: name, Seckill: s, Respond: rsp, Ratio: s / rsp, Goal: goal}
		if met != nil {
			m := met(x.Ratio)
			x.Met = &m
		}
		out = append(out, x)
	}
	buyGoal, buyMin := "≥ 0.7 (memory store)", 0.7
	if b.cfg.store == "redis" {
		buyGoal, buyMin = "≥ 0.5 (redis store)", 0.5
	}
	buyPhase := "selling"
	if b.cfg.scenario == "burst" {
		buyPhase = "burst"
	}
	if g, rsp := find(buyPhase, "seckill"), find(buyPhase, "respond"); g != nil && rsp != nil {
		add("buy path: "+buyPhase+" req/s", g.RPS, rsp.RPS, buyGoal, func(x float64) bool { return x >= buyMin })
		if gb, rb := g.Calls["buy"], rsp.Calls["buy"]; gb.Count > 0 && rb.Count > 0 {
			// The p50 and p99.9 beside the goal's p99: the body and the far tail of the same buys.
			add("buy path: p50 of buy (ms)", gb.P50, rb.P50, "", nil)
			add("buy path: p99 of buy (ms)", gb.P99, rb.P99, "≤ 2", func(x float64) bool { return x <= 2 })
			add("buy path: p99.9 of buy (ms)", gb.P999, rb.P999, "", nil)
		}
		add("buy path: p99 of every request (ms)", g.Latency.P99, rsp.Latency.P99, "", nil)
	}
	salePhase := "sale"
	if b.cfg.scenario == "burst" {
		salePhase = "burst"
	}
	if g, rsp := find(salePhase, "seckill"), find(salePhase, "respond"); g != nil && rsp != nil {
		if salePhase == "sale" {
			add("whole sale: req/s", g.RPS, rsp.RPS, "", nil)
		}
		add("whole "+salePhase+": server CPU per request (µs)", cpuPerRequest(g), cpuPerRequest(rsp), "", nil)
	}
	if g, rsp := find("soak", "seckill"), find("soak", "respond"); g != nil && rsp != nil {
		add("sold-out path: soak req/s", g.RPS, rsp.RPS, "≥ 0.9", func(x float64) bool { return x >= 0.9 })
		add("sold-out path: p99 (ms)", g.Latency.P99, rsp.Latency.P99, "", nil)
		add("sold-out path: server CPU per request (µs)", cpuPerRequest(g), cpuPerRequest(rsp), "", nil)
	}
	return out
}

// cpuPerRequest is the CPU the server side (the gateway, and redis-server and the order backend
// when the bench started them) spent per request, in microseconds. It depends much less on what
// else the machine runs than req/s does: on a shared machine it is the steadier way to compare
// the handler's cost with respond's. 0 when the CPU was not measured.
func cpuPerRequest(t *targetReport) float64 {
	if t.Requests == 0 {
		return 0
	}
	return (t.GatewayCores + t.HelperCores) * t.Seconds / float64(t.Requests) * 1e6
}

func machine() machineInfo {
	m := machineInfo{CPUs: runtime.NumCPU(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		m.LoadAvg = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	return m
}

// print writes the final tables.
func (r *Report) print(w io.Writer) {
	fmt.Fprintf(w, "\n== %s ==\n", r.Title)
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, load average at the end %s\n\n", r.Machine.CPUs, r.Machine.CPUModel, r.Machine.Go, r.Machine.LoadAvg)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttarget\tseconds\trequests\treq/s\terrors\tp50\tp99\tp99.9\tmax\tserver cores\tbench cores\tcpu wait\t")
	for _, p := range r.Phases {
		for _, t := range p.Targets {
			server, bench, wait := "-", "-", "-" // a sub-phase shares its phase's CPU; it has no figure of its own
			if t.GatewayCores+t.HelperCores+t.BenchCores > 0 {
				server, bench = fmt.Sprintf("%.2f", t.GatewayCores+t.HelperCores), fmt.Sprintf("%.2f", t.BenchCores)
			}
			if t.CPUWait != nil {
				wait = fmt.Sprintf("%.0f%%", 100**t.CPUWait)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%d\t%.0f\t%.2f%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
				p.Name, t.Target, t.Seconds, t.Requests, t.RPS, 100*t.ErrorRate,
				fmtMS(t.Latency.P50), fmtMS(t.Latency.P99), fmtMS(t.Latency.P999), fmtMS(t.Latency.Max),
				server, bench, wait)
		}
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "server cores: CPU of the gateway (and redis-server and the order backend, when the bench started them) per second of wall time")
	fmt.Fprintln(w, "cpu wait: share of the time some runnable task on the machine waited for a core (Linux PSI); where it is high, latency is queueing for a CPU")
	fmt.Fprintln(w, "\nlatency by call (flow: arrival or press → buy answer; win→order: 202 → order visible)")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\ttarget\tcall\tcount\tp50\tp99\tp99.9\tmax\t")
	for _, p := range r.Phases {
		for _, t := range p.Targets {
			for c := callKind(0); c < nCalls; c++ {
				if l, ok := t.Calls[c.String()]; ok {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", p.Name, t.Target, c, l.Count, fmtMS(l.P50), fmtMS(l.P99), fmtMS(l.P999), fmtMS(l.Max))
				}
			}
		}
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nanswers by code (seckill)")
	for _, p := range r.Phases {
		for _, t := range p.Targets {
			if t.Target != gateway.String() {
				continue
			}
			var parts []string
			for _, a := range t.Answers {
				parts = append(parts, fmt.Sprintf("%s %d %s: %d", a.Call, a.Status, a.Code, a.Count))
			}
			fmt.Fprintf(w, "  %s: %s\n", p.Name, strings.Join(parts, ", "))
		}
	}

	r.printFunnel(w)

	if r.Selling != nil {
		fmt.Fprintf(w, "\nsold %d items in %.2fs of gateway time from the opening (%.0f wins/s)\n", r.Selling.Wins, r.Selling.SellingS, r.Selling.WinsPerSecond)
	}
	if r.Soak != nil {
		fmt.Fprintf(w, "soak: %d presses on the gateway in %.1fs after the sell-out, %.1f × the stock of %d\n",
			r.Soak.Presses, r.Soak.Seconds, r.Soak.TimesStock, r.Soak.Stock)
	}

	fmt.Fprintln(w, "\nseckill vs Caddy respond, same requests, same process")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tseckill\trespond\tratio\tgoal\t")
	for _, x := range r.Ratios {
		met := ""
		if x.Met != nil {
			met = " (missed)"
			if *x.Met {
				met = " (met)"
			}
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.3f\t%s%s\t\n", x.Name, x.Seckill, x.Respond, x.Ratio, x.Goal, met)
	}
	_ = tw.Flush()

	if r.FunnelErr != "" {
		fmt.Fprintf(w, "\ngateway metrics: not available (%s)\n", r.FunnelErr)
	} else if len(r.Metrics) > 0 {
		fmt.Fprintf(w, "\ngateway metrics (%s*, summed over activities; counters: this run only)\n", metricsPrefix)
		for _, f := range r.Metrics {
			fmt.Fprintf(w, "  %-90s %g\n", f.Series, f.Value)
		}
	}
	for i, p := range r.Processes {
		if i == 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s (pid %d): %.1f s CPU in all, RSS %.1f MB at the end, peak %.1f MB\n", p.Name, p.PID, p.CPUSeconds, p.RSSMB, p.PeakRSSMB)
		// The memory goal is stated for a million distinct users and addresses through the limiters.
		if p.Name == "gateway" && r.Config.Users >= memoryGoalUsers {
			met := "met"
			if p.PeakRSSMB >= memoryGoalMB {
				met = "missed"
			}
			fmt.Fprintf(w, "gateway memory goal: peak RSS %.0f MB after %d users, goal < %d MB (%s)\n", p.PeakRSSMB, r.Config.Users, memoryGoalMB, met)
		}
	}

	fmt.Fprintln(w, "\ninvariants")
	for _, c := range r.Checks {
		st := "ok  "
		if !c.OK {
			st = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s: %s\n", st, c.Name, c.Detail)
	}
	if r.ReconcileErr != "" {
		fmt.Fprintf(w, "  FAIL reconcile: %s\n", r.ReconcileErr)
	}
	if len(r.Reconcile) > 0 {
		fmt.Fprintln(w, "\nreconcile (order backend: store against order database)")
	}
	for _, rr := range r.Reconcile {
		fmt.Fprint(w, indent(rr.String(), "  "))
	}
}

// printFunnel writes the funnel: what each layer refused during the run, cheapest first, and the
// buys admitted. Nothing when the metrics could not be read (the metrics section says why).
func (r *Report) printFunnel(w io.Writer) {
	if r.FunnelErr != "" {
		return
	}
	if len(r.Funnel) == 0 {
		fmt.Fprintf(w, "\nfunnel: not available (the gateway exports no %s)\n", rejectedSeries)
		return
	}
	fmt.Fprintf(w, "\nfunnel (refusals by layer, cheapest first, from %s; this run only)\n", rejectedSeries)
	for _, f := range r.Funnel {
		note := ""
		if f.Layer == admittedLayer {
			note = `  buys answered 202 queued: requests_total{call="buy",code="queued"}`
		}
		fmt.Fprintf(w, "  %-16s %10d%s\n", f.Layer, f.Count, note)
	}
}

func fmtMS(v float64) string {
	return fmtDur(time.Duration(v * float64(time.Millisecond)))
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return pre + strings.Join(lines, "\n"+pre) + "\n"
}

// bucketsTitle is the title's note of a split stock, empty without one.
func bucketsTitle(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(", %d buckets", n)
}

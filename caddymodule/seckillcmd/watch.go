package seckillcmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/term"

	"github.com/caddy-seckill/caddy-seckill/caddymodule"
)

// The watch command: a live view of the sale from the admin API (/seckill/stats and Caddy's
// /metrics), one frame per interval. See docs/OPERATIONS.md.

// watchReading is one poll of the admin API.
type watchReading struct {
	at         time.Time
	store      string
	breaker    string
	activities []caddymodule.AdminActivity
	admitted   map[string]float64 // caddy_seckill_requests_total{call="buy",code="queued"} by activity
	rejected   map[string]float64 // caddy_seckill_rejected_total by layer
	backlog    map[string]float64 // caddy_seckill_orders_backlog by activity; nil without orders
	// The waiting rooms, by activity (only activities with one): caddy_seckill_waiting_room_length,
	// _admitted and _sessions_ended, read from the store at the scrape; and the joins this node
	// refused (caddy_seckill_waiting_room_joins_total but joined and again).
	line, lineAdmitted, lineEnded, joinsRefused map[string]float64
}

// watchFrame is what one screen shows: the latest reading and the rates since the one before.
type watchFrame struct {
	addr           string
	cur            watchReading
	admitsPerS     map[string]float64 // nil on the first reading
	rejectsPerS    map[string]float64
	lineAdmitsPerS map[string]float64 // the waiting rooms' admissions per second
	refusedPerS    map[string]float64 // the waiting rooms' refused joins per second
	err            error              // the last poll failed: the frame shows cur as it was, and the error
}

// watchPoll reads the stats and the metrics from the admin API at addr.
func watchPoll(addr string) (watchReading, error) {
	r := watchReading{at: time.Now()}
	body, err := adminGet(addr, "/seckill/stats")
	if err != nil {
		return r, err
	}
	var stats struct {
		Store      string                      `json:"store"`
		Breaker    string                      `json:"breaker"`
		Activities []caddymodule.AdminActivity `json:"activities"`
	}
	if err := json.Unmarshal(body, &stats); err != nil {
		return r, fmt.Errorf("admin API /seckill/stats: %w", err)
	}
	r.store, r.breaker, r.activities = stats.Store, stats.Breaker, stats.Activities
	body, err = adminGet(addr, "/metrics")
	if err != nil {
		return r, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return r, fmt.Errorf("admin API /metrics: %w", err)
	}
	r.admitted = map[string]float64{}
	r.rejected = map[string]float64{}
	for _, m := range fams["caddy_seckill_requests_total"].GetMetric() {
		if l := labels(m); l["call"] == "buy" && l["code"] == "queued" {
			r.admitted[l["activity"]] += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["caddy_seckill_rejected_total"].GetMetric() {
		r.rejected[labels(m)["layer"]] += m.GetCounter().GetValue()
	}
	gauge := func(name string) map[string]float64 {
		out := map[string]float64{}
		for _, m := range fams[name].GetMetric() {
			out[labels(m)["activity"]] = m.GetGauge().GetValue()
		}
		return out
	}
	r.line, r.lineAdmitted = gauge("caddy_seckill_waiting_room_length"), gauge("caddy_seckill_waiting_room_admitted")
	r.lineEnded = gauge("caddy_seckill_waiting_room_sessions_ended")
	r.joinsRefused = map[string]float64{}
	for _, m := range fams["caddy_seckill_waiting_room_joins_total"].GetMetric() {
		if l := labels(m); l["result"] != "joined" && l["result"] != "again" {
			r.joinsRefused[l["activity"]] += m.GetCounter().GetValue()
		}
	}
	if f, ok := fams["caddy_seckill_orders_backlog"]; ok {
		r.backlog = map[string]float64{}
		for _, m := range f.GetMetric() {
			r.backlog[labels(m)["activity"]] = m.GetGauge().GetValue()
		}
	}
	return r, nil
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// adminGet reads uri from the admin API.
func adminGet(addr, uri string) ([]byte, error) {
	resp, err := caddycmd.AdminAPIRequest(addr, http.MethodGet, uri, make(http.Header), nil)
	if err != nil {
		return nil, fmt.Errorf("admin API %s %s: %w", addr, uri, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("admin API %s %s: %w", addr, uri, err)
	}
	return body, nil
}

// next makes the frame of reading cur after prev (prev.at zero: the first reading, no rates).
func watchNext(addr string, prev, cur watchReading) watchFrame {
	f := watchFrame{addr: addr, cur: cur}
	dt := cur.at.Sub(prev.at).Seconds()
	if prev.at.IsZero() || dt <= 0 {
		return f
	}
	rate := func(now, before map[string]float64) map[string]float64 {
		out := make(map[string]float64, len(now))
		for k, v := range now {
			d := v - before[k]
			if d < 0 { // a counter reset (a restart): count from zero
				d = v
			}
			out[k] = d / dt
		}
		return out
	}
	f.admitsPerS, f.rejectsPerS = rate(cur.admitted, prev.admitted), rate(cur.rejected, prev.rejected)
	f.lineAdmitsPerS = rate(cur.lineAdmitted, prev.lineAdmitted)
	f.refusedPerS = rate(cur.joinsRefused, prev.joinsRefused)
	return f
}

// watchRow is the width of the table's row without its activity column: a terminal narrower than
// the row gets two lines per activity instead.
const watchRow = 63

// watchRoomRow is the width of the waiting room table's row without its activity column.
const watchRoomRow = 59

// render lays the frame out for a terminal width columns wide; no line is longer than width.
func (f watchFrame) render(width int) []string {
	if width <= 0 {
		width = 80
	}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	c := f.cur
	if c.at.IsZero() {
		add("caddy-seckill watch  %s  waiting for the admin API", f.addr)
	} else {
		add("caddy-seckill watch  %s  store %s  breaker %s  %s", f.addr, c.store, c.breaker, c.at.Format("15:04:05"))
	}
	if f.err != nil {
		// Wrapped, not cut: the end of an error ("connection refused") is what tells.
		for msg := "! " + f.err.Error(); msg != ""; {
			n := min(len(msg), width)
			add("%s", msg[:n])
			msg = msg[n:]
		}
	}
	if c.at.IsZero() {
		return fit(lines, width)
	}
	rate := func(m map[string]float64, k string) string {
		if m == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", m[k])
	}
	backlog := func(id string) string {
		if c.backlog == nil {
			return "-" // no order backend in this process
		}
		if n, ok := c.backlog[id]; ok {
			return fmt.Sprintf("%.0f", n)
		}
		return "?" // its consumer group does not exist yet
	}
	flag := func(a caddymodule.AdminActivity) string {
		if a.SoldOut {
			return "sold out"
		}
		return ""
	}
	idw := 8
	for _, a := range c.activities {
		idw = max(idw, min(len(a.ID), 24))
	}
	if len(c.activities) == 0 {
		add("")
		add("no activities")
	} else if width >= idw+watchRow {
		add("")
		add("%-*s %13s %6s %9s %6s %8s %5s  %s", idw, "ACTIVITY", "LEFT/STOCK", "SOLD", "ADMITS/S", "WINS", "BACKLOG", "DEAD", "FLAG")
		for _, a := range c.activities {
			add("%-*s %13s %6d %9s %6d %8s %5d  %s", idw, clip(a.ID, idw), fmt.Sprintf("%d/%d", a.Remaining, a.Stock),
				a.Sold, rate(f.admitsPerS, a.ID), a.Wins, backlog(a.ID), a.Dead, flag(a))
		}
	} else {
		for _, a := range c.activities {
			add("%s  left %d/%d  admits/s %s", a.ID, a.Remaining, a.Stock, rate(f.admitsPerS, a.ID))
			add("  sold %d wins %d backlog %s dead %d %s", a.Sold, a.Wins, backlog(a.ID), a.Dead, flag(a))
		}
	}
	// The waiting rooms: everyone who joined, those still waiting, the line's pace, the sessions
	// over and the joins refused.
	rw := max(idw, len("WAITING_ROOM"))
	header := false
	for _, a := range c.activities {
		n, ok := c.line[a.ID]
		if !ok {
			continue
		}
		if !header {
			header = true
			add("")
			if width >= rw+watchRoomRow {
				add("%-*s %8s %8s %11s %9s %7s %10s", rw, "WAITING_ROOM", "LINE", "WAITING", "ADMITTED/S", "ADMITTED", "ENDED", "REFUSED/S")
			} else {
				add("WAITING_ROOM")
			}
		}
		in := c.lineAdmitted[a.ID]
		if width >= rw+watchRoomRow {
			add("%-*s %8.0f %8.0f %11s %9.0f %7.0f %10s", rw, clip(a.ID, rw), n, max(n-in, 0), rate(f.lineAdmitsPerS, a.ID), in,
				c.lineEnded[a.ID], rate(f.refusedPerS, a.ID))
		} else {
			add("%s  line %.0f waiting %.0f", a.ID, n, max(n-in, 0))
			add("  admitted/s %s (%.0f)", rate(f.lineAdmitsPerS, a.ID), in)
			add("  ended %.0f refused/s %s", c.lineEnded[a.ID], rate(f.refusedPerS, a.ID))
		}
	}
	add("")
	add("REJECTED/S BY LAYER (total)")
	var cells []string
	for _, name := range caddymodule.RejectedLayers() {
		cells = append(cells, fmt.Sprintf("%-14s %7s (%.0f)", name, rate(f.rejectsPerS, name), c.rejected[name]))
	}
	cellw := 0
	for _, s := range cells {
		cellw = max(cellw, len(s))
	}
	cellw += 2
	perLine := max(1, width/cellw)
	for i := 0; i < len(cells); i += perLine {
		var b strings.Builder
		for j := i; j < min(i+perLine, len(cells)); j++ {
			fmt.Fprintf(&b, "%-*s", cellw, cells[j])
		}
		add("%s", strings.TrimRight(b.String(), " "))
	}
	return fit(lines, width)
}

// fit cuts every line to width and drops trailing blanks.
func fit(lines []string, width int) []string {
	for i, l := range lines {
		lines[i] = strings.TrimRight(clip(l, width), " ")
	}
	return lines
}

// clip cuts s to at most n bytes (the frame is ASCII, except what an activity id cannot hold).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func cmdWatch(fl caddycmd.Flags) (int, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("admin API address: %w", err)
	}
	every := fl.Duration("interval")
	if every < 100*time.Millisecond {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("--interval %s: at least 100ms", every)
	}
	out := os.Stdout
	tty := term.IsTerminal(int(out.Fd()))
	width := func() int {
		if w, _, err := term.GetSize(int(out.Fd())); err == nil && w > 0 {
			return w
		}
		return 100 // not a terminal: lines are not cut short
	}

	if fl.Bool("once") {
		// Two readings an interval apart, so that the rates are real.
		first, err := watchPoll(addr)
		if err != nil {
			return caddy.ExitCodeFailedStartup, err
		}
		time.Sleep(every)
		cur, err := watchPoll(addr)
		if err != nil {
			return caddy.ExitCodeFailedStartup, err
		}
		fmt.Fprintln(out, strings.Join(watchNext(addr, first, cur).render(width()), "\n"))
		return caddy.ExitCodeSuccess, nil
	}

	quit := make(chan struct{}, 1)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	go func() { <-sigs; quit <- struct{}{} }()
	eol := "\n"
	if tty {
		// Raw keyboard, so that q quits without Enter; output then needs \r\n.
		if in := int(os.Stdin.Fd()); term.IsTerminal(in) {
			if old, err := term.MakeRaw(in); err == nil {
				defer func() { _ = term.Restore(in, old) }()
				go watchKeys(os.Stdin, quit)
			}
		}
		eol = "\r\n"
		fmt.Fprint(out, "\x1b[?1049h\x1b[?25l") // the alternate screen, no cursor
		defer fmt.Fprint(out, "\x1b[?25h\x1b[?1049l")
	}

	var prev watchReading
	var last watchFrame
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		cur, err := watchPoll(addr)
		if err == nil {
			last = watchNext(addr, prev, cur)
			prev = cur
		} else {
			last.addr, last.err = addr, err
		}
		lines := last.render(width())
		if tty {
			// Home, each line over the old one, then clear what the last frame left below.
			fmt.Fprint(out, "\x1b[H"+strings.Join(lines, "\x1b[K"+eol)+"\x1b[K"+eol+"q quits\x1b[K\x1b[J")
		} else {
			fmt.Fprint(out, strings.Join(lines, eol)+eol+eol)
		}
		select {
		case <-quit:
			return caddy.ExitCodeSuccess, nil
		case <-t.C:
		}
	}
}

// watchKeys signals quit on q, Q, Ctrl-C or Ctrl-D, or when the input ends.
func watchKeys(in io.Reader, quit chan<- struct{}) {
	buf := make([]byte, 64)
	for {
		n, err := in.Read(buf)
		if bytes.ContainsAny(buf[:n], "qQ\x03\x04") || err != nil {
			select {
			case quit <- struct{}{}:
			default:
			}
			return
		}
	}
}

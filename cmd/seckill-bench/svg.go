package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"os"
	"strings"
	"time"
)

// chartPoint is one window of one target.
type chartPoint struct {
	Requests      int64
	P50, P99, Max time.Duration
}

// chartData is what the latency-over-time chart shows.
type chartData struct {
	Title  string
	Window time.Duration
	Points [nTargets][]chartPoint // one per window
	Marks  []mark
}

// chartFrom takes the recorder's windows, up to the last one with a request.
func chartFrom(rec *recorder, title string) chartData {
	c := chartData{Title: title, Window: rec.windowSize}
	ws := rec.windowList()
	last := -1
	for i, w := range ws {
		for t := range w.requests {
			if w.requests[t].Load() > 0 {
				last = i
			}
		}
	}
	for t := target(0); t < nTargets; t++ {
		for i := 0; i <= last; i++ {
			h := ws[i].lat[t]
			c.Points[t] = append(c.Points[t], chartPoint{
				Requests: ws[i].requests[t].Load(), P50: h.Quantile(0.5), P99: h.Quantile(0.99), Max: h.Max(),
			})
		}
	}
	rec.mu.Lock()
	c.Marks = append(c.Marks, rec.marks...)
	rec.mu.Unlock()
	return c
}

func writeChartFile(path string, rec *recorder, title string) error {
	var buf bytes.Buffer
	renderChart(&buf, chartFrom(rec, title))
	if err := writeFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("write the chart: %w", err)
	}
	return nil
}

func writeFile(path string, data []byte) error {
	return os.WriteFile(path, data, 0o644)
}

// Chart geometry.
const (
	chartW     = 1100
	chartH     = 640
	padL       = 70
	padR       = 20
	latTop     = 60
	latBottom  = 400
	rateTop    = 450
	rateBottom = 590
	legendY    = 620
	plotW      = chartW - padL - padR
)

// color is a target's color on the chart: red for the seckill handler, blue for respond.
func (t target) color() string {
	if t == baseline {
		return "#1f77b4"
	}
	return "#d62728"
}

// renderChart writes the chart as a self-contained SVG: latency percentiles per window on a log
// scale (top) and requests per second (bottom), the seckill handler in red, respond in blue, with
// the phase boundaries marked.
func renderChart(b *bytes.Buffer, c chartData) {
	n := 0
	for _, p := range c.Points {
		n = max(n, len(p))
	}
	total := time.Duration(max(n, 1)) * c.Window
	x := func(d time.Duration) float64 { return padL + float64(plotW)*float64(d)/float64(total) }

	// Latency range, in milliseconds, rounded out to powers of ten.
	lo, hi := math.Inf(1), 0.0
	var peakRate float64
	for _, pts := range c.Points {
		for _, p := range pts {
			if p.Requests == 0 {
				continue
			}
			lo = math.Min(lo, math.Max(ms(p.P50), 0.001))
			hi = math.Max(hi, ms(p.Max))
			peakRate = math.Max(peakRate, float64(p.Requests)/c.Window.Seconds())
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 10
	}
	loExp, hiExp := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(math.Max(hi, lo*10)))
	yLat := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, loExp))
		f := (math.Log10(v) - loExp) / (hiExp - loExp)
		return latBottom - f*(latBottom-latTop)
	}
	rateMax := niceCeil(math.Max(peakRate, 1))
	yRate := func(v float64) float64 { return rateBottom - v/rateMax*(rateBottom-rateTop) }

	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", padL, esc(c.Title))
	fmt.Fprintf(b, `<text x="%d" y="42" fill="#555">latency per %s window: p50 (thin), p99 (thick), max (dotted); log scale</text>`+"\n", padL, c.Window)

	// Axes and grid.
	for e := loExp; e <= hiExp; e++ {
		y := yLat(math.Pow(10, e))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, chartW-padR, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, esc(fmtMS(math.Pow(10, e))))
	}
	for i := 0; i <= 4; i++ {
		v := rateMax * float64(i) / 4
		y := yRate(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, chartW-padR, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, humanRate(v))
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" fill="#555">requests per second</text>`+"\n", padL, rateTop-8)
	step := niceCeil(total.Seconds() / 10)
	for s := 0.0; s <= total.Seconds()+1e-9; s += step {
		xx := x(time.Duration(s * float64(time.Second)))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/>`+"\n", xx, latTop, xx, rateBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%gs</text>`+"\n", xx, rateBottom+16, s)
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", padL, latTop, plotW, latBottom-latTop)
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", padL, rateTop, plotW, rateBottom-rateTop)

	// Phase marks.
	for _, m := range c.Marks {
		xx := x(m.At)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#999" stroke-dasharray="4 3"/>`+"\n", xx, latTop, xx, rateBottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" fill="#333" transform="rotate(90 %.1f %d)">%s</text>`+"\n", xx+3, latTop+4, xx+3, latTop+4, esc(m.Label))
	}

	// Series: a polyline per run of consecutive windows with requests.
	for t := target(0); t < nTargets; t++ {
		pts := c.Points[t]
		mid := func(i int) time.Duration { return time.Duration(i)*c.Window + c.Window/2 }
		lines := []struct {
			v     func(p chartPoint) float64
			width string
			dash  string
			y     func(float64) float64
		}{
			{func(p chartPoint) float64 { return ms(p.P50) }, "1", "", yLat},
			{func(p chartPoint) float64 { return ms(p.P99) }, "2.5", "", yLat},
			{func(p chartPoint) float64 { return ms(p.Max) }, "1", "2 3", yLat},
			{func(p chartPoint) float64 { return float64(p.Requests) / c.Window.Seconds() }, "2", "", yRate},
		}
		for _, l := range lines {
			var seg []string
			flush := func() {
				if len(seg) == 1 {
					seg = append(seg, seg[0]) // a lone window still shows as a dot
				}
				if len(seg) > 0 {
					dash := ""
					if l.dash != "" {
						dash = fmt.Sprintf(` stroke-dasharray="%s"`, l.dash)
					}
					fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%s" stroke-linecap="round"%s points="%s"/>`+"\n",
						t.color(), l.width, dash, strings.Join(seg, " "))
				}
				seg = seg[:0]
			}
			for i, p := range pts {
				if p.Requests == 0 {
					flush()
					continue
				}
				seg = append(seg, fmt.Sprintf("%.1f,%.1f", x(mid(i)), l.y(l.v(p))))
			}
			flush()
		}
	}

	// Legend.
	for t := target(0); t < nTargets; t++ {
		lx := padL + int(t)*260
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", lx, legendY-4, lx+30, legendY-4, t.color())
		name := "seckill handler"
		if t == baseline {
			name = "Caddy respond (same requests)"
		}
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", lx+36, legendY, esc(name))
	}
	fmt.Fprintln(b, `</svg>`)
}

func esc(s string) string { return html.EscapeString(s) }

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func humanRate(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%gk", math.Round(v/100)/10)
	}
	return fmt.Sprintf("%g", math.Round(v))
}

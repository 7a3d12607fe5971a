package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// metricsPrefix selects the gateway's own series on Caddy's metrics endpoint. The names are not
// fixed by the contract, so the bench reads whatever exists under the prefix.
const metricsPrefix = "caddy_seckill_"

// series is one sample of the metrics text format: a name with its labels, and a value.
type series struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Value  float64           `json:"value"`
	// Help is the metric's HELP text (for series named as the metric: not a histogram's _count).
	Help string `json:"-"`
}

// scrapeMetrics reads the caddy_seckill_ series from the admin endpoint's /metrics. Histogram
// buckets are left out (their _count and _sum stay).
func scrapeMetrics(ctx context.Context, admin string) ([]series, error) {
	if admin == "" {
		return nil, fmt.Errorf("no admin endpoint")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read metrics: HTTP %d", resp.StatusCode)
	}
	return parseMetrics(resp.Body, metricsPrefix)
}

// parseMetrics parses the Prometheus text format, keeping the series whose name has prefix, each
// with its metric's HELP text when the series is named as the metric.
func parseMetrics(r io.Reader, prefix string) ([]series, error) {
	var out []series
	help := map[string]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if h, ok := strings.CutPrefix(line, "# HELP "+prefix); ok {
			if name, text, ok := strings.Cut(h, " "); ok {
				help[prefix+name] = unescapeHelp(text)
			}
			continue
		}
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, prefix) {
			continue
		}
		s, err := parseSeries(line)
		if err != nil {
			return nil, err
		}
		if strings.HasSuffix(s.Name, "_bucket") {
			continue
		}
		s.Help = help[s.Name]
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
}

// unescapeHelp undoes the text format's escaping of a HELP text (\\ and \n).
func unescapeHelp(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	return strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(s)
}

// parseSeries parses `name{k="v",...} value [timestamp]`.
func parseSeries(line string) (series, error) {
	s := series{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("metrics line %q: no value", line)
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		s.Labels = map[string]string{}
		line = line[1:]
		for {
			line = strings.TrimLeft(line, ", ")
			if strings.HasPrefix(line, "}") {
				line = line[1:]
				break
			}
			eq := strings.Index(line, `="`)
			if eq < 0 {
				return s, fmt.Errorf("metrics series %s: bad labels", s.Name)
			}
			key := line[:eq]
			line = line[eq+2:]
			var val strings.Builder
			j := 0
			for ; j < len(line) && line[j] != '"'; j++ {
				if line[j] == '\\' && j+1 < len(line) {
					j++
					switch line[j] {
					case 'n':
						val.WriteByte('\n')
						continue
					}
				}
				val.WriteByte(line[j])
			}
			if j >= len(line) {
				return s, fmt.Errorf("metrics series %s: unterminated label", s.Name)
			}
			s.Labels[key] = val.String()
			line = line[j+1:]
		}
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return s, fmt.Errorf("metrics series %s: no value", s.Name)
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return s, fmt.Errorf("metrics series %s: value %q: %w", s.Name, f[0], err)
	}
	s.Value = v
	return s, nil
}

// metricLine is one metric summed over activities, as the run changed it.
type metricLine struct {
	Series string  `json:"series"`
	Value  float64 `json:"value"`
}

// cumulative reports whether a series only grows, so that the run's share is after - before.
func cumulative(name string) bool {
	return strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum")
}

// metricDeltas sums the series over their activity label, and subtracts the values before the run
// from counters, so every line is what this run did (gauges: their value at the end).
func metricDeltas(before, after []series) []metricLine {
	key := func(s series) string {
		var labels []string
		for k, v := range s.Labels {
			if k != "activity" {
				labels = append(labels, k+"="+v)
			}
		}
		sort.Strings(labels)
		if len(labels) == 0 {
			return s.Name
		}
		return s.Name + "{" + strings.Join(labels, ",") + "}"
	}
	sums := map[string]float64{}
	for _, s := range after {
		sums[key(s)] += s.Value
	}
	for _, s := range before {
		if cumulative(s.Name) {
			sums[key(s)] -= s.Value
		}
	}
	out := make([]metricLine, 0, len(sums))
	for k, v := range sums {
		if v == 0 && strings.Contains(k, "_total") {
			continue
		}
		out = append(out, metricLine{Series: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Series < out[j].Series })
	return out
}

// The gateway's funnel metrics: refusals by layer, and the answers that admitted a buyer.
const (
	rejectedSeries = metricsPrefix + "rejected_total"
	requestsSeries = metricsPrefix + "requests_total"
	// helpOrder starts the list of layers, in funnel order, in rejected_total's HELP text.
	helpOrder = "funnel order: "
	// admittedLayer names the funnel's last line: the buys answered queued. It is not a layer of
	// rejected_total (an admission is no refusal): requests_total{call="buy",code="queued"}.
	admittedLayer = "admitted"
)

// funnelLayer is one layer of the gateway's funnel with what it refused during the run; the last
// line, admitted, is the buys the store admitted.
type funnelLayer struct {
	Layer string `json:"layer"`
	Count int64  `json:"count"`
}

// funnelLayers reads the funnel from the gateway's metrics: rejected_total by layer, in the
// funnel order its HELP text lists (layers it does not list follow, by name), zeros included,
// then admitted. Counts are this run's (after - before). Nil when the gateway exports no
// rejected_total.
func funnelLayers(before, after []series) []funnelLayer {
	counts := map[string]float64{}
	var order []string
	var admitted float64
	add := func(ss []series, sign float64) {
		for _, s := range ss {
			switch {
			case s.Name == rejectedSeries:
				l := s.Labels["layer"]
				if _, ok := counts[l]; !ok && sign < 0 {
					continue // a layer the gateway no longer has
				}
				counts[l] += sign * s.Value
				if order == nil && sign > 0 {
					order = helpLayers(s.Help)
				}
			case s.Name == requestsSeries && s.Labels["call"] == "buy" && s.Labels["code"] == "queued":
				admitted += sign * s.Value
			}
		}
	}
	add(after, 1)
	if len(counts) == 0 {
		return nil
	}
	add(before, -1)
	out := make([]funnelLayer, 0, len(counts)+1)
	listed := map[string]bool{}
	for _, l := range order {
		if v, ok := counts[l]; ok && !listed[l] {
			listed[l] = true
			out = append(out, funnelLayer{Layer: l, Count: int64(math.Round(v))})
		}
	}
	var rest []string
	for l := range counts {
		if !listed[l] {
			rest = append(rest, l)
		}
	}
	sort.Strings(rest)
	for _, l := range rest {
		out = append(out, funnelLayer{Layer: l, Count: int64(math.Round(counts[l]))})
	}
	return append(out, funnelLayer{Layer: admittedLayer, Count: int64(math.Round(admitted))})
}

// helpLayers returns the layers rejected_total's HELP text lists after "funnel order: ", up to
// the end of that sentence.
func helpLayers(help string) []string {
	_, list, ok := strings.Cut(help, helpOrder)
	if !ok {
		return nil
	}
	list, _, _ = strings.Cut(list, ".")
	var out []string
	for _, l := range strings.Split(list, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

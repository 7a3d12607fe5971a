package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
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

// parseMetrics parses the Prometheus text format, keeping the series whose name has prefix.
func parseMetrics(r io.Reader, prefix string) ([]series, error) {
	var out []series
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
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
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read metrics: %w", err)
	}
	return out, nil
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

// funnelLine is one metric summed over activities, as the run changed it.
type funnelLine struct {
	Series string  `json:"series"`
	Value  float64 `json:"value"`
}

// cumulative reports whether a series only grows, so that the run's share is after - before.
func cumulative(name string) bool {
	return strings.HasSuffix(name, "_total") || strings.HasSuffix(name, "_count") || strings.HasSuffix(name, "_sum")
}

// funnel sums the series over their activity label, and subtracts the values before the run from
// counters, so every line is what this run did (gauges: their value at the end).
func funnel(before, after []series) []funnelLine {
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
	out := make([]funnelLine, 0, len(sums))
	for k, v := range sums {
		if v == 0 && strings.Contains(k, "_total") {
			continue
		}
		out = append(out, funnelLine{Series: k, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Series < out[j].Series })
	return out
}

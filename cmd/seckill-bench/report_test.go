package main

import (
	"regexp"
	"strings"
	"testing"
)

// TestRatiosBuyPercentiles: the ratio table gives the buy's p50, p99 and p99.9 against respond's,
// the p99 with its goal, in the report's table and in its JSON field.
func TestRatiosBuyPercentiles(t *testing.T) {
	target := func(name string, p50, p99, p999 float64) targetReport {
		return targetReport{
			Target: name, Seconds: 1, Requests: 1000, RPS: 1000,
			Latency: latency{Count: 1000, P50: p50, P99: p99, P999: p999},
			Calls:   map[string]latency{"buy": {Count: 1000, P50: p50, P99: p99, P999: p999}},
		}
	}
	b := &bench{cfg: config{scenario: "burst"}}
	r := &Report{Phases: []phaseReport{{Name: "burst", Targets: []targetReport{
		target("seckill", 2, 9, 30), target("respond", 1, 6, 10),
	}}}}
	r.Ratios = b.ratios(r)
	want := map[string]float64{
		"buy path: p50 of buy (ms)":   2,
		"buy path: p99 of buy (ms)":   1.5,
		"buy path: p99.9 of buy (ms)": 3,
	}
	for _, x := range r.Ratios {
		if w, ok := want[x.Name]; ok {
			if x.Ratio != w {
				t.Errorf("%s: ratio %v, want %v", x.Name, x.Ratio, w)
			}
			if (x.Name == "buy path: p99 of buy (ms)") != (x.Met != nil) {
				t.Errorf("%s: goal verdict %v", x.Name, x.Met)
			}
			delete(want, x.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing ratios: %v in %+v", want, r.Ratios)
	}
	var out strings.Builder
	r.print(&out)
	for _, line := range []string{`buy path: p50 of buy \(ms\) +2\.00 +1\.00 +2\.000`, `buy path: p99\.9 of buy \(ms\) +30\.00 +10\.00 +3\.000`} {
		if !regexp.MustCompile(line).MatchString(out.String()) {
			t.Errorf("want %s in the table:\n%s", line, out.String())
		}
	}
}

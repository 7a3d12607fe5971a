package main

import (
	"reflect"
	"strings"
	"testing"
)

const metricsText = `# HELP caddy_seckill_requests_total Calls.
# TYPE caddy_seckill_requests_total counter
caddy_seckill_requests_total{activity="a",call="buy",code="queued"} 10
caddy_seckill_requests_total{activity="b",call="buy",code="queued"} 5
caddy_seckill_requests_total{activity="a",call="buy",code="sold_out"} 100
caddy_seckill_admission_duration_seconds_bucket{activity="a",outcome="queued",le="0.001"} 9
caddy_seckill_admission_duration_seconds_count{activity="a",outcome="queued"} 10
# HELP caddy_seckill_rejected_total Refusals by layer; layers in funnel order: route, ip_limit, window, sold_out_flag, store_sold_out. Admitted buys are requests_total{call="buy",code="queued"}.
# TYPE caddy_seckill_rejected_total counter
caddy_seckill_rejected_total{layer="ip_limit"} 7
caddy_seckill_rejected_total{layer="route"} 0
caddy_seckill_rejected_total{layer="sold_out_flag"} 90
caddy_seckill_rejected_total{layer="store_sold_out"} 10
caddy_seckill_rejected_total{layer="window"} 0
caddy_seckill_rejected_total{layer="zz_new"} 2
caddy_seckill_remaining{activity="a"} 0
caddy_seckill_remaining{activity="b"} 3
caddy_seckill_odd{activity="a",msg="say \"hi\", ok"} 1.5e+00 1700000000
caddy_http_requests_total{server="srv0"} 99
go_goroutines 12
`

func TestParseMetrics(t *testing.T) {
	got, err := parseMetrics(strings.NewReader(metricsText), metricsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 13 {
		t.Fatalf("%d series, want 13 (no bucket, no other prefix): %+v", len(got), got)
	}
	if h := got[5].Help; got[5].Name != "caddy_seckill_rejected_total" || !strings.HasPrefix(h, "Refusals by layer; layers in funnel order: route,") {
		t.Errorf("series %s: help %q", got[5].Name, h)
	}
	odd := got[12]
	if odd.Name != "caddy_seckill_odd" || odd.Value != 1.5 || !reflect.DeepEqual(odd.Labels, map[string]string{"activity": "a", "msg": `say "hi", ok`}) {
		t.Fatalf("escaped label: %+v", odd)
	}
	if _, err := parseMetrics(strings.NewReader(`caddy_seckill_x{a="unterminated} 1`), metricsPrefix); err == nil {
		t.Error("an unterminated label parses")
	}
	if _, err := parseMetrics(strings.NewReader(`caddy_seckill_x notanumber`), metricsPrefix); err == nil {
		t.Error("a bad value parses")
	}
}

func TestMetricDeltasSumActivitiesAndSubtractCounters(t *testing.T) {
	before, _ := parseMetrics(strings.NewReader(`caddy_seckill_requests_total{activity="a",call="buy",code="queued"} 4
caddy_seckill_remaining{activity="a"} 10
`), metricsPrefix)
	after, err := parseMetrics(strings.NewReader(metricsText), metricsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, l := range metricDeltas(before, after) {
		got[l.Series] = l.Value
	}
	want := map[string]float64{
		"caddy_seckill_requests_total{call=buy,code=queued}":             11, // 10 + 5 - 4
		"caddy_seckill_requests_total{call=buy,code=sold_out}":           100,
		"caddy_seckill_admission_duration_seconds_count{outcome=queued}": 10,
		"caddy_seckill_remaining":                                        3, // a gauge: its value at the end
		"caddy_seckill_rejected_total{layer=ip_limit}":                   7,
		"caddy_seckill_rejected_total{layer=sold_out_flag}":              90,
		"caddy_seckill_rejected_total{layer=store_sold_out}":             10,
		"caddy_seckill_rejected_total{layer=zz_new}":                     2,
		`caddy_seckill_odd{msg=say "hi", ok}`:                            1.5,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("funnel\n got %v\nwant %v", got, want)
	}
}

// TestFunnelLayers checks the funnel table: every layer in the order the gateway's help text
// gives, zeros included, this run's counts only, layers the help does not list after them, then
// the admitted buys.
func TestFunnelLayers(t *testing.T) {
	before, _ := parseMetrics(strings.NewReader(`caddy_seckill_requests_total{activity="a",call="buy",code="queued"} 4
caddy_seckill_rejected_total{layer="sold_out_flag"} 30
caddy_seckill_rejected_total{layer="gone_layer"} 5
`), metricsPrefix)
	after, err := parseMetrics(strings.NewReader(metricsText), metricsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	want := []funnelLayer{
		{"route", 0}, {"ip_limit", 7}, {"window", 0}, {"sold_out_flag", 60}, {"store_sold_out", 10},
		{"zz_new", 2}, {"admitted", 11},
	}
	if got := funnelLayers(before, after); !reflect.DeepEqual(got, want) {
		t.Errorf("funnel\n got %v\nwant %v", got, want)
	}
	// A gateway without rejected_total has no funnel (not a funnel of zeros).
	old, _ := parseMetrics(strings.NewReader(`caddy_seckill_requests_total{activity="a",call="buy",code="queued"} 4
`), metricsPrefix)
	if got := funnelLayers(nil, old); got != nil {
		t.Errorf("funnel without rejected_total: %v", got)
	}
	if got := helpLayers(`Refusals; layers in funnel order: a, b_c ,d. Admitted: x, y.`); !reflect.DeepEqual(got, []string{"a", "b_c", "d"}) {
		t.Errorf("helpLayers = %v", got)
	}
}

// TestPrintFunnel checks the funnel table of the terminal report.
func TestPrintFunnel(t *testing.T) {
	var b strings.Builder
	r := &Report{Funnel: []funnelLayer{{"ip_limit", 7}, {"window", 0}, {"admitted", 11}}}
	r.printFunnel(&b)
	out := b.String()
	for _, want := range []string{"\nfunnel (", "  ip_limit                  7\n", "  window                    0\n", "  admitted                 11  buys answered 202 queued"} {
		if !strings.Contains(out, want) {
			t.Errorf("funnel table lacks %q:\n%s", want, out)
		}
	}
	if strings.Index(out, "ip_limit") > strings.Index(out, "window") || strings.Index(out, "window") > strings.Index(out, "admitted") {
		t.Errorf("funnel table out of order:\n%s", out)
	}
	b.Reset()
	(&Report{}).printFunnel(&b)
	if !strings.Contains(b.String(), "funnel: not available") {
		t.Errorf("no funnel: %q", b.String())
	}
	b.Reset()
	(&Report{FunnelErr: "down"}).printFunnel(&b)
	if b.String() != "" {
		t.Errorf("funnel printed although the metrics could not be read: %q", b.String())
	}
}

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
	if len(got) != 7 {
		t.Fatalf("%d series, want 7 (no bucket, no other prefix): %+v", len(got), got)
	}
	odd := got[6]
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

func TestFunnelSumsActivitiesAndSubtractsCounters(t *testing.T) {
	before, _ := parseMetrics(strings.NewReader(`caddy_seckill_requests_total{activity="a",call="buy",code="queued"} 4
caddy_seckill_remaining{activity="a"} 10
`), metricsPrefix)
	after, err := parseMetrics(strings.NewReader(metricsText), metricsPrefix)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, l := range funnel(before, after) {
		got[l.Series] = l.Value
	}
	want := map[string]float64{
		"caddy_seckill_requests_total{call=buy,code=queued}":             11, // 10 + 5 - 4
		"caddy_seckill_requests_total{call=buy,code=sold_out}":           100,
		"caddy_seckill_admission_duration_seconds_count{outcome=queued}": 10,
		"caddy_seckill_remaining":                                        3, // a gauge: its value at the end
		`caddy_seckill_odd{msg=say "hi", ok}`:                            1.5,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("funnel\n got %v\nwant %v", got, want)
	}
}

package main

import (
	"strings"
	"testing"
	"time"
)

func TestParsePressure(t *testing.T) {
	const psi = "some avg10=4.40 avg60=33.38 avg300=37.30 total=346690263\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
	if d, ok := parsePressure(psi); !ok || d != 346690263*time.Microsecond {
		t.Errorf("parsePressure = %v, %v; want 346.690263s, true", d, ok)
	}
	for _, bad := range []string{"", "full avg10=0.00 total=5\n", "some avg10=1.00\n", "some total=x\n", "some total=-3\n"} {
		if d, ok := parsePressure(bad); ok {
			t.Errorf("parsePressure(%q) = %v, true; want false", bad, d)
		}
	}
}

// TestMemoryGoalLine: a run of a million users states the gateway memory goal, met or missed; a
// smaller run does not claim it.
func TestMemoryGoalLine(t *testing.T) {
	for _, c := range []struct {
		users int
		peak  float64
		want  string
	}{
		{1_000_000, 157, "goal < 200 MB (met)"},
		{1_000_000, 201, "goal < 200 MB (missed)"},
		{20_000, 157, ""},
	} {
		var b strings.Builder
		r := &Report{Config: reportConfig{Users: c.users}, Processes: []processInfo{{Name: "gateway", PeakRSSMB: c.peak}}}
		r.print(&b)
		got := b.String()
		if c.want == "" && strings.Contains(got, "memory goal") || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%d users, peak %.0f MB: want %q in:\n%s", c.users, c.peak, c.want, got)
		}
	}
}

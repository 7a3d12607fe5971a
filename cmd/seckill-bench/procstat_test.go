package main

import (
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

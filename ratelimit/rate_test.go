package ratelimit

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	good := []struct {
		in   string
		want Rate
	}{
		{"20/s burst 40", Rate{20, time.Second, 40}},
		{"100/m", Rate{100, time.Minute, 100}},
		{"5/h", Rate{5, time.Hour, 5}},
		{"2/s", Rate{2, time.Second, 2}},
		{"10/100ms", Rate{10, 100 * time.Millisecond, 10}},
		{"1/ms", Rate{1, time.Millisecond, 1}},
		{"3/10s BURST 1", Rate{3, 10 * time.Second, 1}},
		{"  7/1m30s   burst   9 ", Rate{7, 90 * time.Second, 9}},
	}
	for _, c := range good {
		got, err := ParseRate(c.in)
		if err != nil {
			t.Errorf("ParseRate(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseRate(%q) = %+v, want %+v", c.in, got, c.want)
		}
		back, err := ParseRate(got.String())
		if err != nil || back != got {
			t.Errorf("ParseRate(%q.String() = %q) = %+v, %v; want a round trip", c.in, got.String(), back, err)
		}
	}

	bad := []struct{ in, wantMsg string }{
		{"", "want <events>/<period>"},
		{"20", "missing '/'"},
		{"20/", "missing period"},
		{"/s", "events"},
		{"x/s", "events \"x\""},
		{"0/s", "events must be"},
		{"-1/s", "events must be"},
		{"20/fortnight", "period \"fortnight\""},
		{"20/0s", "period must be"},
		{"20/-1s", "period must be"},
		{"20/48h", "period must be"},
		{"20/s burst", "want <events>/<period>"},
		{"20/s burst 0", "burst must be"},
		{"20/s burst -3", "burst must be"},
		{"20/s burst x", "burst \"x\""},
		{"20/s bust 4", "want <events>/<period>"},
		{"2000/ms", "more than one per microsecond"},
		{"99999999999999999999/s", "events"},
	}
	for _, c := range bad {
		_, err := ParseRate(c.in)
		if err == nil {
			t.Errorf("ParseRate(%q): no error", c.in)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.wantMsg) {
			t.Errorf("ParseRate(%q) error %q does not mention %q", c.in, msg, c.wantMsg)
		}
		if msg != strings.ToLower(msg[:1])+msg[1:] {
			t.Errorf("ParseRate(%q) error %q does not start lowercase", c.in, msg)
		}
	}
}

func TestPolicy(t *testing.T) {
	for _, c := range []struct {
		r    Rate
		want string
	}{
		{Rate{20, time.Second, 20}, "20;w=1"},
		{Rate{20, time.Second, 40}, "20;w=1;burst=40"},
		{Rate{100, time.Minute, 100}, "100;w=60"},
		{Rate{10, 100 * time.Millisecond, 10}, "100;w=1;burst=10"},
		{Rate{1, 3 * time.Second / 2, 1}, "1;w=1"},
	} {
		if got := c.r.Policy(); got != c.want {
			t.Errorf("%v.Policy() = %q, want %q", c.r, got, c.want)
		}
	}
}

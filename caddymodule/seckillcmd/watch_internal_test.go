package seckillcmd

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/caddymodule"
)

// TestWatchRender lays frames out for terminals from very narrow to wide: no line is wider than
// the terminal, the figures and every layer are there, an error is wrapped whole, and a frame
// without a reading says it is waiting.
func TestWatchRender(t *testing.T) {
	at := time.Date(2026, 12, 1, 20, 0, 1, 0, time.UTC)
	prev := watchReading{at: at.Add(-time.Second), admitted: map[string]float64{"phone-1001": 10},
		rejected: map[string]float64{"sold_out_flag": 100}, lineAdmitted: map[string]float64{"phone-1001": 500},
		joinsRefused: map[string]float64{"phone-1001": 10}}
	cur := watchReading{at: at, store: "redis", breaker: "closed",
		activities: []caddymodule.AdminActivity{
			{ID: "phone-1001", Stock: 100, Remaining: 37, Sold: 63, Wins: 63, Dead: 1},
			{ID: "tv-2002", Stock: 5, Remaining: 0, Sold: 5, Wins: 5, SoldOut: true},
		},
		admitted: map[string]float64{"phone-1001": 60, "tv-2002": 5},
		rejected: map[string]float64{"sold_out_flag": 1100, "jwt": 3},
		backlog:  map[string]float64{"phone-1001": 4},
		// phone-1001 has a waiting room (tv-2002 none): 1234 joined, 700 let through, 200 in the
		// last second, 650 sessions over, 25 joins refused in the last second.
		line:         map[string]float64{"phone-1001": 1234},
		lineAdmitted: map[string]float64{"phone-1001": 700},
		lineEnded:    map[string]float64{"phone-1001": 650},
		joinsRefused: map[string]float64{"phone-1001": 35},
	}
	f := watchNext("127.0.0.1:2019", prev, cur)
	for _, width := range []int{20, 40, 71, 72, 80, 120, 200} {
		lines := f.render(width)
		text := strings.Join(lines, "\n")
		for _, l := range lines {
			if len(l) > width {
				t.Errorf("width %d: line of %d: %q", width, len(l), l)
			}
		}
		if width >= 80 {
			for _, want := range []string{"store redis", "breaker closed", "20:00:01", "phone-1001", "37/100", "50.0",
				"sold out", "sold_out_flag", "1000.0 (1100)", "jwt", "(3)", "limit_reached"} {
				if !strings.Contains(text, want) {
					t.Errorf("width %d: no %q in\n%s", width, want, text)
				}
			}
		}
		if width >= len("phone-1001")+watchRow {
			// The table: tv-2002 has no consumer group yet (?), phone-1001 a backlog of 4.
			row := func(id string) []string {
				for _, l := range lines {
					if f := strings.Fields(l); len(f) > 0 && f[0] == id {
						return f
					}
				}
				return nil
			}
			if r := row("phone-1001"); len(r) < 7 || r[3] != "50.0" || r[4] != "63" || r[5] != "4" || r[6] != "1" {
				t.Errorf("width %d: phone-1001 row %q", width, r)
			}
			if r := row("tv-2002"); len(r) < 9 || r[5] != "?" || r[7]+" "+r[8] != "sold out" {
				t.Errorf("width %d: tv-2002 row %q", width, r)
			}
		}
		// The waiting room: a table when it fits, two lines per activity when not; only the
		// activity that has one.
		if strings.Count(text, "WAITING_ROOM") != 1 {
			t.Errorf("width %d: no single WAITING_ROOM section in\n%s", width, text)
		}
		switch {
		case width >= len("WAITING_ROOM")+watchRoomRow:
			want := regexp.MustCompile(`(?m)^phone-1001 +1234 +534 +200\.0 +700 +650 +25\.0$`)
			if !want.MatchString(text) {
				t.Errorf("width %d: no waiting room row for phone-1001 in\n%s", width, text)
			}
		case width >= 40:
			if !strings.Contains(text, "phone-1001  line 1234 waiting 534") || !strings.Contains(text, "admitted/s 200.0 (700)") ||
				!strings.Contains(text, "ended 650 refused/s 25.0") {
				t.Errorf("width %d: no narrow waiting room lines in\n%s", width, text)
			}
		}
		if regexp.MustCompile(`(?m)^tv-2002 .*(line|waiting)`).MatchString(text) {
			t.Errorf("width %d: tv-2002 has no waiting room, but shows one:\n%s", width, text)
		}
	}

	// The first reading has no rates; without orders the backlog is "-".
	first := watchNext("a", watchReading{}, watchReading{at: at, activities: cur.activities})
	if text := strings.Join(first.render(100), "\n"); !strings.Contains(text, "   -") || strings.Contains(text, "50.0") {
		t.Errorf("first frame:\n%s", text)
	}

	// A failed first poll: waiting, and the whole error, wrapped.
	long := errors.New(strings.Repeat("x", 90) + " connection refused")
	lines := watchFrame{addr: "a", err: long}.render(60)
	text := strings.Join(lines, "")
	if !strings.Contains(lines[0], "waiting for the admin API") || !strings.Contains(text, "connection refused") || len(lines) != 3 {
		t.Errorf("error frame: %q", lines)
	}
}

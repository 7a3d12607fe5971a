package seckillcmd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
)

// terminal is a child process on a pseudo-terminal, with everything it wrote.
type terminal struct {
	t    *testing.T
	cmd  *exec.Cmd
	tty  *os.File
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func startTerminal(t *testing.T, cols, rows uint16, bin string, args ...string) *terminal {
	t.Helper()
	term := &terminal{t: t, cmd: exec.Command(bin, args...), done: make(chan error, 1)}
	tty, err := pty.StartWithSize(term.cmd, &pty.Winsize{Cols: cols, Rows: rows})
	if err != nil {
		t.Fatal(err)
	}
	term.tty = tty
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() { term.done <- term.cmd.Wait() }()
	t.Cleanup(func() {
		_ = term.cmd.Process.Kill()
		_ = tty.Close()
	})
	return term
}

// ansi matches the escape sequences watch writes.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// screen returns the last complete frame as lines, without escape sequences, and how many
// frames were drawn.
func (term *terminal) screen() ([]string, int) {
	term.mu.Lock()
	raw := term.out.String()
	term.mu.Unlock()
	frames := strings.Split(raw, "\x1b[H")
	for i := len(frames) - 1; i > 0; i-- {
		if strings.Contains(frames[i], "\x1b[J") { // drawn to the end
			text := ansi.ReplaceAllString(frames[i], "")
			return strings.Split(strings.TrimRight(text, "\r\n"), "\r\n"), len(frames) - 1
		}
	}
	return nil, 0
}

// watchScreen is what a frame of the wide layout says.
type watchScreen struct {
	header                   string
	left, stock, sold, wins  int64
	admits                   float64
	backlog                  string
	dead                     int64
	soldOut                  bool
	layerTotals              map[string]int64
	maxWidth                 int
	narrowLeft, narrowAdmits string // the narrow layout's "left a/b" and admits/s
}

var layerCell = regexp.MustCompile(`([a-z_]+)\s+(-|[0-9.]+) \(([0-9]+)\)`)

func parseWatch(lines []string, activity string) (watchScreen, bool) {
	s := watchScreen{layerTotals: map[string]int64{}}
	found := false
	for i, l := range lines {
		s.maxWidth = max(s.maxWidth, len(l))
		if i == 0 {
			s.header = l
		}
		f := strings.Fields(l)
		if len(f) >= 7 && f[0] == activity && strings.Contains(f[1], "/") {
			found = true
			ls, st, _ := strings.Cut(f[1], "/")
			s.left, _ = strconv.ParseInt(ls, 10, 64)
			s.stock, _ = strconv.ParseInt(st, 10, 64)
			s.sold, _ = strconv.ParseInt(f[2], 10, 64)
			s.admits, _ = strconv.ParseFloat(f[3], 64)
			s.wins, _ = strconv.ParseInt(f[4], 10, 64)
			s.backlog = f[5]
			s.dead, _ = strconv.ParseInt(f[6], 10, 64)
			s.soldOut = strings.HasSuffix(l, "sold out")
		}
		if len(f) >= 5 && f[0] == activity && f[1] == "left" {
			found = true
			s.narrowLeft, s.narrowAdmits = f[2], f[4]
		}
		for _, m := range layerCell.FindAllStringSubmatch(l, -1) {
			n, _ := strconv.ParseInt(m[3], 10, 64)
			s.layerTotals[m[1]] = n
		}
	}
	return s, found
}

// TestWatch drives `caddy seckill watch` in a pseudo-terminal during a short sale: frames redraw
// in place, admits/s shows the buying, the figures on the screen match the admin API once the
// sale is over, a narrow terminal gets lines that fit, and q quits. --once without a terminal
// prints one plain frame.
func TestWatch(t *testing.T) {
	bin := testcaddy.BuildCaddy(t)
	// A long payment window: no order expires while the test compares the figures.
	block := strings.Replace(testcaddy.SaleBlock("watch", 20), "pay_within "+testcaddy.PayWindow.String(), "pay_within 10m", 1)
	s := testcaddy.StartSale(t, testcaddy.JWTBlock+"captcha off\n"+block+testcaddy.OrdersOption("sqlite "+filepath.Join(t.TempDir(), "orders.db")))
	term := startTerminal(t, 100, 30, bin, "seckill", "watch", "--address", s.AdminAddr, "--interval", "250ms")
	testcaddy.Eventually(t, "a first frame", func() (bool, string) {
		lines, n := term.screen()
		return n > 0, strings.Join(lines, "\n")
	})

	// The sale: 25 buyers for 20 items, a few per frame, so that admits/s is seen above zero;
	// one forged path and one call without a token on the way.
	c := s.Client
	testcaddy.Expect(t, "forged path", c.Post("/seckill/watch/buy/0123456789abcdef", testcaddy.Token(t, "x"), ""), http.StatusNotFound, "bad_path")
	testcaddy.Expect(t, "no token", c.Post("/seckill/watch/path", "", ""), http.StatusUnauthorized, "unauthorized")
	var toks, paths []string
	for i := range 25 {
		tok := testcaddy.Token(t, fmt.Sprintf("w%d", i))
		toks, paths = append(toks, tok), append(paths, testcaddy.BuyPath(t, c, "watch", tok))
	}
	sawAdmits := 0.0
	for i, tok := range toks {
		r := c.Post(paths[i], tok, "")
		if r.Status != http.StatusAccepted && r.Status != http.StatusGone {
			t.Fatalf("buy %d: %s", i, r)
		}
		time.Sleep(60 * time.Millisecond)
		if lines, _ := term.screen(); lines != nil {
			if sc, ok := parseWatch(lines, "watch"); ok {
				sawAdmits = max(sawAdmits, sc.admits)
			}
		}
	}

	// Once the orders are made, the screen shows what the admin API says.
	var last string
	testcaddy.Eventually(t, "the screen matches the admin API", func() (bool, string) {
		lines, _ := term.screen()
		sc, ok := parseWatch(lines, "watch")
		if !ok {
			return false, strings.Join(lines, "\n")
		}
		sawAdmits = max(sawAdmits, sc.admits)
		status, body := s.AdminCall(t, http.MethodGet, "/seckill/activities/watch", "")
		var a struct {
			Stock, Remaining, Sold, Wins, Dead int64
			SoldOut                            bool `json:"sold_out_flag"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &a) != nil {
			t.Fatalf("admin API: %d %s", status, body)
		}
		_, metrics := s.AdminCall(t, http.MethodGet, "/metrics", "")
		last = strings.Join(lines, "\n") + "\nadmin: " + string(body)
		if sc.left != a.Remaining || sc.stock != a.Stock || sc.sold != a.Sold || sc.wins != a.Wins ||
			sc.dead != a.Dead || sc.soldOut != a.SoldOut || sc.backlog != "0" || a.Wins != 20 || a.Remaining != 0 {
			return false, last
		}
		if !strings.Contains(sc.header, "breaker closed") || !strings.Contains(sc.header, "store memory") {
			return false, last
		}
		for _, layer := range []string{"hashed_url", "jwt", "sold_out_flag", "store_sold_out", "route"} {
			want := int64(testcaddy.MetricValue(t, string(metrics), fmt.Sprintf(`caddy_seckill_rejected_total{layer=%q}`, layer)))
			if got, ok := sc.layerTotals[layer]; !ok || got != want {
				return false, fmt.Sprintf("layer %s: screen %d, metrics %d\n%s", layer, got, want, last)
			}
		}
		return sc.layerTotals["hashed_url"] == 1 && sc.layerTotals["jwt"] == 1, last
	})
	if sawAdmits <= 0 {
		t.Errorf("admits/s never above 0 while 20 buys were admitted\n%s", last)
	}

	// A narrow terminal: the next frames fit in 50 columns, in the narrow layout.
	if err := pty.Setsize(term.tty, &pty.Winsize{Cols: 50, Rows: 30}); err != nil {
		t.Fatal(err)
	}
	testcaddy.Eventually(t, "a narrow frame", func() (bool, string) {
		lines, _ := term.screen()
		sc, ok := parseWatch(lines, "watch")
		return ok && sc.narrowLeft == "0/20" && sc.maxWidth <= 50, strings.Join(lines, "\n")
	})

	// q quits, and the terminal gets its screen and cursor back.
	if _, err := term.tty.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-term.done:
		if err != nil {
			t.Fatalf("watch exited: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not quit on q")
	}
	// The process has ended, but the pty's last bytes may still be on their way to term.out.
	testcaddy.Eventually(t, "the cursor and the screen restored", func() (bool, string) {
		term.mu.Lock()
		tail := term.out.String()
		term.mu.Unlock()
		return strings.Contains(tail, "\x1b[?25h\x1b[?1049l"), fmt.Sprintf("%q", tail[max(0, len(tail)-80):])
	})

	// --once, not on a terminal: one plain frame with the same figures.
	out, err := exec.Command(bin, "seckill", "watch", "--address", s.AdminAddr, "--once", "--interval", "200ms").Output()
	if err != nil {
		t.Fatalf("watch --once: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("\x1b")) {
		t.Errorf("watch --once wrote escape sequences: %q", out)
	}
	sc, ok := parseWatch(strings.Split(string(out), "\n"), "watch")
	if !ok || sc.left != 0 || sc.stock != 20 || sc.wins != 20 || sc.backlog != "0" || sc.admits != 0 || sc.layerTotals["jwt"] != 1 {
		t.Errorf("watch --once: %+v\n%s", sc, out)
	}
	if err := exec.Command(bin, "seckill", "watch", "--address", s.AdminAddr, "--once", "--interval", "1ms").Run(); err == nil {
		t.Error("an interval of 1ms was accepted")
	}
}

// TestWatchWaitingRoom: for an activity with a waiting room, watch shows its line as the
// gateway's metrics count it: everyone who joined, those still waiting, those let through, the
// sessions over and the joins refused per second; an activity without one gets no such row.
func TestWatchWaitingRoom(t *testing.T) {
	bin := testcaddy.BuildCaddy(t)
	now := time.Now()
	room := fmt.Sprintf("activity room {\n\tstock 5\n\tstart %s\n\tend %s\n\twaiting_room {\n\t\tadmit 1/h\n\t}\n}\n",
		testcaddy.RFC3339(now.Add(-time.Minute)), testcaddy.RFC3339(now.Add(time.Hour)))
	s := testcaddy.StartSale(t, testcaddy.JWTBlock+"captcha off\n"+room+testcaddy.SaleBlock("plain", 5)+
		testcaddy.OrdersOption("sqlite "+filepath.Join(t.TempDir(), "orders.db")))
	// One admission an hour: the first joiner is let through, the two behind wait.
	for _, user := range []string{"alice", "bob", "carol"} {
		testcaddy.Expect(t, user+" joins", s.Client.Post("/seckill/room/queue", testcaddy.Token(t, user), ""), http.StatusOK, "ok")
	}
	out, err := exec.Command(bin, "seckill", "watch", "--address", s.AdminAddr, "--once", "--interval", "200ms").Output()
	if err != nil {
		t.Fatalf("watch --once: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^room +3 +2 +0\.0 +1 +0 +0\.0$`)
	if !strings.Contains(string(out), "WAITING_ROOM") || !row.Match(out) {
		t.Errorf("watch --once: want the row room 3 joined, 2 waiting, 0.0/s, 1 admitted, 0 ended, 0.0 refused/s:\n%s", out)
	}
	if regexp.MustCompile(`(?m)^plain +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9]+ +[0-9]+ +[0-9.]+$`).Match(out) {
		t.Errorf("watch --once shows a waiting room for plain, which has none:\n%s", out)
	}
}

package caddymodule_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fairnessAlpha bounds the chance that TestFairness fails on a fair line: the winners' split
// between the groups is checked against the central 1 - 1e-6 of its hypergeometric law.
const fairnessAlpha = 1e-6

// fairness is one measured sale: the buyers of each group in the line (the pre-queue, for a
// room) and among the winners.
type fairness struct {
	fastLine, slowLine int64
	fastWins, slowWins int64
	// slowDrawn counts the slow buyers among the first stock places the lottery drew (a room
	// only): the winners differ from them only by turns overtaken at the stock's end.
	slowDrawn int64
}

func (f fairness) String() string {
	return fmt.Sprintf("line: %d fast, %d slow; winners: %d fast, %d slow (slow share %.2f of the line, %.2f of the winners; %d slow in the lottery's first places)",
		f.fastLine, f.slowLine, f.fastWins, f.slowWins,
		float64(f.slowLine)/float64(f.fastLine+f.slowLine), float64(f.slowWins)/float64(max(f.fastWins+f.slowWins, 1)), f.slowDrawn)
}

// TestFairness measures the fifth promise. Two groups of the same size buy the same stock:
// "fast" buyers, two connections each, who turn up at the last instant before the start and
// hammer the buy step in a loop; "slow" ones, 20 ms away, who came early and ask again only when
// told (refresh_ms with a room, once a second without one). Without a waiting room the fast group
// takes (nearly) every item. With one, every buyer who joined before the start is in the
// lottery, so the slow group's count among the winners follows the hypergeometric law of its
// share of the line, and is checked against the central 1 - 1e-6 of it (the test cannot flake).
// SECKILL_FAIRNESS_SCALE=4 runs it four times bigger.
func TestFairness(t *testing.T) {
	if testing.Short() {
		t.Skip("a timed sale of a few seconds")
	}
	scale := 1
	if s := os.Getenv("SECKILL_FAIRNESS_SCALE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 16 {
			t.Fatalf("SECKILL_FAIRNESS_SCALE=%q: want 1 to 16", s)
		}
		scale = n
	}
	users, stock := 40*scale, 20*scale

	var off fairness
	t.Run("room off", func(t *testing.T) {
		off = runFairSale(t, users, stock, false)
		t.Logf("room off: %s", off)
		if off.fastWins+off.slowWins != int64(stock) {
			t.Fatalf("%d winners for a stock of %d", off.fastWins+off.slowWins, stock)
		}
		// The race goes to the fast: the slow ask a second late at best.
		if off.slowWins*10 > int64(stock) {
			t.Errorf("without a room the slow group won %d of %d: want the fast group to take (nearly) all", off.slowWins, stock)
		}
	})
	t.Run("room on", func(t *testing.T) {
		on := runFairSale(t, users, stock, true)
		t.Logf("room on: %s", on)
		wins := on.fastWins + on.slowWins
		if wins != int64(stock) {
			t.Fatalf("%d winners for a stock of %d", wins, stock)
		}
		lo, hi := hypergeometricBounds(on.fastLine+on.slowLine, on.slowLine, wins, fairnessAlpha)
		if on.slowWins < lo || on.slowWins > hi {
			t.Errorf("with a room the slow group won %d of %d; a fair lottery gives %d to %d (p ≤ %g outside)",
				on.slowWins, wins, lo, hi, fairnessAlpha)
		}
		t.Logf("bound for the slow group's winners: %d to %d", lo, hi)
	})
}

// runFairSale runs one sale of stock items to users fast and users slow buyers, with a waiting
// room or without, and counts the winners of each group.
func runFairSale(t *testing.T, users, stock int, room bool) fairness {
	// The slow group joins first; the start leaves it time to (a second per 40 buyers at worst).
	lead := 2*time.Second + time.Duration(users)*25*time.Millisecond
	start := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)
	end := start.Add(time.Hour)
	act := "fair"
	block := activityBlock(act, stock, 1, start, end, 0)
	if room {
		// 20 admissions a second: a slow buyer's turn (asked 20 ms after it comes, path and buy
		// on a 20 ms link) is not overtaken by more than a place or two. A session long enough
		// that no turn passes unused on a loaded machine.
		block = roomBlock(act, stock, start, end, "opens 10m\nadmit 20/s\nsession 1m")
	}
	base := startCaddy(t, jwtBlock+"captcha off\n"+block, route)

	toks := func(group string) []string {
		out := make([]string, users)
		for i := range out {
			out[i] = token(t, fmt.Sprintf("%s%d", group, i))
		}
		return out
	}
	fastToks, slowToks := toks("fast"), toks("slow")

	var f fairness
	var wg sync.WaitGroup
	slowClient := newClient(t, base)
	fastClient := newClient(t, base)
	const slowLink = 20 * time.Millisecond
	slowDo := func(method, path, tok string) response {
		time.Sleep(slowLink / 2)
		r := slowClient.Do(method, path, tok, nil)
		time.Sleep(slowLink / 2)
		return r
	}
	// buy takes the path and buys once: true for a win. sold tells that nothing is left.
	buy := func(do func(method, path, tok string) response, tok string) (won, over bool) {
		r := do(http.MethodPost, "/seckill/"+act+"/path", tok)
		switch {
		case r.Status == http.StatusGone:
			return false, true
		case r.Status != http.StatusOK:
			return false, false
		}
		r = do(http.MethodPost, r.Str("path"), tok)
		switch r.Code() {
		case "queued":
			return true, true
		case "sold_out", "limit_reached":
			return false, true
		}
		return false, false
	}

	// The slow group: early, each at its own pace.
	for i, tok := range slowToks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(i), 7))
			if room {
				r := slowDo(http.MethodPost, "/seckill/"+act+"/queue", tok)
				if r.Status != http.StatusOK {
					t.Errorf("slow%d joins: %s", i, r)
					return
				}
				if r.Num("position") == 0 {
					atomic.AddInt64(&f.slowLine, 1)
				}
				for time.Now().Before(end) {
					switch r.Str("state") {
					case "admitted":
						if won, _ := buy(slowDo, tok); won {
							atomic.AddInt64(&f.slowWins, 1)
						}
						return
					case "closed", "expired":
						return
					}
					time.Sleep(time.Duration(r.Num("refresh_ms")) * time.Millisecond)
					r = slowDo(http.MethodGet, "/seckill/"+act+"/queue", tok)
					if r.Status != http.StatusOK {
						t.Errorf("slow%d polls: %s", i, r)
						return
					}
				}
				return
			}
			atomic.AddInt64(&f.slowLine, 1)
			for time.Now().Before(end) {
				r := slowDo(http.MethodGet, "/seckill/"+act, "")
				switch r.Str("state") {
				case "open":
					won, over := buy(slowDo, tok)
					if won {
						atomic.AddInt64(&f.slowWins, 1)
					}
					if over {
						return
					}
				case "sold_out", "ended":
					return
				}
				time.Sleep(800*time.Millisecond + time.Duration(rnd.IntN(400))*time.Millisecond)
			}
		}()
	}

	// The fast group: at the last instant before the start, all at once, two connections each
	// and no pause.
	time.Sleep(time.Until(start.Add(-300 * time.Millisecond)))
	var fastWon sync.Map
	for i, tok := range fastToks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if room {
				r := fastClient.Post("/seckill/"+act+"/queue", tok, "")
				switch {
				case r.Code() == "sold_out": // the machine was too slow for this one: not in the line
					return
				case r.Status != http.StatusOK:
					t.Errorf("fast%d joins: %s", i, r)
					return
				case r.Num("position") == 0:
					atomic.AddInt64(&f.fastLine, 1)
				}
			} else {
				atomic.AddInt64(&f.fastLine, 1)
			}
			var conns sync.WaitGroup
			for range 2 {
				conns.Add(1)
				go func() {
					defer conns.Done()
					do := func(method, path, tok string) response { return fastClient.Do(method, path, tok, nil) }
					for time.Now().Before(end) {
						if _, done := fastWon.Load(i); done {
							return
						}
						won, over := buy(do, tok)
						if won {
							fastWon.Store(i, true)
							atomic.AddInt64(&f.fastWins, 1)
						}
						if over {
							return
						}
					}
				}()
			}
			conns.Wait()
		}()
	}
	wg.Wait()
	if n := remaining(t, act); n != 0 {
		t.Errorf("remaining %d after the sale, want 0", n)
	}
	if room {
		for _, tok := range slowToks {
			if p := slowClient.Get("/seckill/"+act+"/queue", tok).Num("position"); p >= 1 && p <= int64(stock) {
				f.slowDrawn++
			}
		}
	}
	return f
}

// hypergeometricBounds returns the smallest lo and the largest hi such that a hypergeometric
// count (draws out of n, k of them marked) falls below lo, or above hi, with probability at most
// alpha/2 each.
func hypergeometricBounds(n, k, draws int64, alpha float64) (lo, hi int64) {
	lnC := func(a, b int64) float64 {
		x, _ := math.Lgamma(float64(a + 1))
		y, _ := math.Lgamma(float64(b + 1))
		z, _ := math.Lgamma(float64(a - b + 1))
		return x - y - z
	}
	pmf := func(x int64) float64 {
		if x < 0 || x > k || draws-x > n-k || draws-x < 0 {
			return 0
		}
		return math.Exp(lnC(k, x) + lnC(n-k, draws-x) - lnC(n, draws))
	}
	lo, hi = 0, draws
	for tail := 0.0; lo <= draws; lo++ {
		if tail+pmf(lo) > alpha/2 {
			break
		}
		tail += pmf(lo)
	}
	for tail := 0.0; hi >= 0; hi-- {
		if tail+pmf(hi) > alpha/2 {
			break
		}
		tail += pmf(hi)
	}
	return lo, hi
}

// TestHypergeometricBounds checks the bound against values worked by hand: 20 draws from 40 of
// which 20 are marked, C(40,20) = 137846528820: P(X ≤ 2) = (1 + 400 + 36100) / C(40,20) ≈
// 2.6e-7, below 5e-7, and P(X ≤ 3) adds 1140² / C(40,20) ≈ 9.4e-6; symmetric above.
func TestHypergeometricBounds(t *testing.T) {
	lo, hi := hypergeometricBounds(40, 20, 20, 1e-6)
	if lo != 3 || hi != 17 {
		t.Errorf("bounds (40, 20, 20) = %d..%d, want 3..17", lo, hi)
	}
	if lo, hi := hypergeometricBounds(10, 0, 5, 1e-6); lo != 0 || hi != 0 {
		t.Errorf("nobody marked: %d..%d, want 0..0", lo, hi)
	}
}

package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// sale builds the outcome of a clean sale: 2 activities × 3 items, 10 users (5 per activity), the
// first 3 users of each activity won, the others were refused, and the store agrees.
func sale() (*config, *users, map[string]storeView) {
	cfg := &config{activities: 2, stock: 3, limit: 1, pollTimeout: 1}
	us := newUsers(10, []string{"a0", "a1"})
	won := map[int]int{}
	for u := 0; u < us.n; u++ {
		a := us.activityOf(u)
		if won[a] < 3 {
			won[a]++
			us.outcome[u] = outcomeWon
			us.reservation[u] = "r" + strconv.Itoa(won[a])
			us.confirmed[u] = true
		} else {
			us.outcome[u] = outcomeLost
		}
	}
	views := map[string]storeView{
		"a0": {Remaining: 0, Sold: 3, Buyers: 3, Wins: 3, FromAdmin: true},
		"a1": {Remaining: 0, Sold: 3, Buyers: 3, Wins: 3, FromAdmin: true},
	}
	return cfg, us, views
}

func failed(checks []check) []string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Name+": "+c.Detail)
		}
	}
	return out
}

func TestInvariantsHoldForACleanSale(t *testing.T) {
	cfg, us, views := sale()
	checks := evaluate(cfg, us, false, views, "admin API", nil)
	if f := failed(checks); len(f) > 0 {
		t.Fatalf("a clean sale fails: %v", f)
	}
	if len(checks) != 6 {
		t.Fatalf("%d checks, want 6", len(checks))
	}
}

// Every check must catch the fault it is there for, and only the checks concerned may fail.
func TestInvariantsCatchViolations(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(cfg *config, us *users, views map[string]storeView)
		want   []string // names of the checks that must fail (prefixes)
	}{
		{"oversell", func(cfg *config, us *users, v map[string]storeView) {
			us.outcome[6], us.reservation[6], us.confirmed[6] = outcomeWon, "r4", true // a 4th winner in a0
			v["a0"] = storeView{Remaining: -1, Sold: 4, Wins: 4, FromAdmin: true}
		}, []string{"winners ≤ stock"}},
		{"duplicate reservation", func(cfg *config, us *users, v map[string]storeView) {
			us.reservation[2] = us.reservation[0]
		}, []string{"every 202 reservation distinct"}},
		{"missing reservation id", func(cfg *config, us *users, v map[string]storeView) {
			us.reservation[2] = ""
			us.confirmed[2] = true
		}, []string{"every 202 reservation distinct"}},
		{"second win for a user (soak)", func(cfg *config, us *users, v map[string]storeView) {
			us.extraWins[0] = []string{"r9"}
			v["a0"] = storeView{Remaining: -1, Sold: 4, Wins: 4, FromAdmin: true}
		}, []string{"winners ≤ stock", "no user above the limit"}},
		{"store sold more than was answered (a lost win)", func(cfg *config, us *users, v map[string]storeView) {
			us.outcome[4], us.reservation[4] = outcomeLost, "" // the user was told it lost
			v["a0"] = storeView{Remaining: 0, Sold: 3, Wins: 3, FromAdmin: true}
		}, []string{"store agrees"}},
		{"store sold less than was answered (a phantom win)", func(cfg *config, us *users, v map[string]storeView) {
			v["a1"] = storeView{Remaining: 1, Sold: 2, Wins: 2, FromAdmin: true}
		}, []string{"store agrees", "no undersell"}},
		{"wins queue disagrees", func(cfg *config, us *users, v map[string]storeView) {
			v["a1"] = storeView{Remaining: 0, Sold: 3, Wins: 2, FromAdmin: true}
		}, []string{"store agrees"}},
		{"undersell: everyone answered, items left", func(cfg *config, us *users, v map[string]storeView) {
			us.outcome[1], us.reservation[1], us.confirmed[1] = outcomeLost, "", false
			us.outcome[9] = outcomeLost
			v["a1"] = storeView{Remaining: 1, Sold: 2, Wins: 2, FromAdmin: true}
		}, []string{"no undersell"}},
		{"unconfirmed win", func(cfg *config, us *users, v map[string]storeView) {
			us.confirmed[3] = false
		}, []string{"every win shows in /result"}},
		{"store unreadable", func(cfg *config, us *users, v map[string]storeView) {
			for k := range v {
				delete(v, k)
			}
		}, []string{"store agrees"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, us, views := sale()
			c.break_(cfg, us, views)
			var viewErr error
			if len(views) == 0 {
				viewErr = errors.New("admin API: connection refused")
			}
			f := failed(evaluate(cfg, us, false, views, "admin API", viewErr))
			if len(f) != len(c.want) {
				t.Fatalf("failed checks %v, want exactly %v", f, c.want)
			}
			for i, w := range c.want {
				if !strings.HasPrefix(f[i], w) {
					t.Errorf("failed check %q, want %q", f[i], w)
				}
			}
		})
	}
}

// A buy whose answer was lost may or may not have sold an item: the store may hold one more than
// the wins answered, but not two.
func TestInvariantsUnknownOutcomeSlack(t *testing.T) {
	cfg, us, views := sale()
	us.outcome[2], us.reservation[2], us.confirmed[2] = outcomeUnknown, "", false
	views["a0"] = storeView{Remaining: 0, Sold: 3, Wins: 3, FromAdmin: true} // it did sell
	if f := failed(evaluate(cfg, us, false, views, "admin API", nil)); len(f) > 0 {
		t.Fatalf("an unknown outcome that sold: %v", f)
	}
	views["a0"] = storeView{Remaining: 1, Sold: 2, Wins: 2, FromAdmin: true} // it did not
	if f := failed(evaluate(cfg, us, false, views, "admin API", nil)); len(f) > 0 {
		t.Fatalf("an unknown outcome that did not sell: %v", f)
	}
	views["a0"] = storeView{Remaining: -1, Sold: 4, Wins: 4, FromAdmin: true}
	if f := failed(evaluate(cfg, us, false, views, "admin API", nil)); len(f) != 1 || !strings.HasPrefix(f[0], "store agrees") {
		t.Fatalf("two unexplained sales: %v", f)
	}
}

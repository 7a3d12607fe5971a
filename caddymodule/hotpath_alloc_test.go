//go:build !race

package caddymodule_test

import (
	"net/http"
	"testing"
)

// The race detector allocates on its own (and empties sync.Pools at random), so this runs without it.

// TestHotPathAllocations pins what the handler allocates on the buy path and the sold-out
// refusals (the HotPath benchmarks' cases) over what Caddy's respond allocates for the same
// request in the same server, so that Caddy's own share cancels out whatever its version. The
// handler's own are the request and its placeholder function (and, on a win without an
// Idempotency-Key, its random request id); a win adds what the memory store's tables grow by.
func TestHotPathAllocations(t *testing.T) {
	s := startHotSale(t, "")
	u := s.users[1]
	allocs := func(r *http.Request, status int) float64 {
		w := &sinkWriter{header: http.Header{}}
		return testing.AllocsPerRun(500, func() {
			w.reset()
			s.srv.ServeHTTP(w, r)
			if w.status != status {
				t.Fatalf("%s: got %d %s", r.URL.Path, w.status, w.body)
			}
		})
	}
	respond := allocs(s.request(http.MethodPost, "/baseline"+u.paths["open"], u, ""), http.StatusOK)
	keyed := s.request(http.MethodPost, u.paths["gone"], u, "key-1")
	waitHeldLoaded(t, s, keyed)
	for _, c := range []struct {
		name   string
		r      *http.Request
		status int
		more   float64 // allocations allowed over respond's
	}{
		{"sold_out", s.request(http.MethodPost, u.paths["gone"], u, ""), http.StatusGone, 1},
		{"sold_out_keyed", keyed, http.StatusGone, 1}, // refused at the flag, as sold_out is
		// 3 and what the store grows by: 1 to 2 a win, on average over the runs.
		{"won", s.request(http.MethodPost, u.paths["open"], u, ""), http.StatusAccepted, 5},
	} {
		if n := allocs(c.r, c.status); n > respond+c.more {
			t.Errorf("%s allocates %.1f times a request, respond %.1f: more than %.0f over respond's", c.name, n, respond, c.more)
		} else {
			t.Logf("%s: %.1f allocations, respond %.1f", c.name, n, respond)
		}
	}
}

package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// TestProofOfWorkModule: web/pow.js, in Chromium with Web Crypto, finds the answer the gateway's
// Go code checks (the smallest one, as waitroom.Solve), for challenges the gateway signs.
func TestProofOfWorkModule(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.FileServerFS(Files))
	t.Cleanup(srv.Close)
	tb := newTab(t, "pow", desktop)
	tb.do(chromedp.Navigate(srv.URL + "/pow.js"))

	key := waitroom.ProofKey("salt")
	for _, bits := range []int{1, 8, 14} {
		c, err := waitroom.NewChallenge(key, "act", "alice", bits, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got := eval[string](tb, fmt.Sprintf(`(async () => {
			const { solveChallenge } = await import("/pow.js");
			return await solveChallenge(%q, %d);
		})()`, c.Token, bits))
		if want := waitroom.Solve(c.Token, bits); got != want {
			t.Errorf("%d bits: pow.js answered %q, want %q", bits, got, want)
		}
		if _, err := waitroom.CheckProof(key, "act", "alice", bits, c.Token, got, time.Now()); err != nil {
			t.Errorf("%d bits: pow.js's answer %q: %v", bits, got, err)
		}
	}
	zeros := eval[[]float64](tb, `(async () => {
		const { leadingZeroBits } = await import("/pow.js");
		return [[0x80], [0x01], [0x00, 0x40], [0x00, 0x00], [0x0f, 0xff]].map((b) => leadingZeroBits(new Uint8Array(b).buffer));
	})()`)
	if fmt.Sprint(zeros) != "[0 7 9 16 4]" {
		t.Errorf("leadingZeroBits = %v, want [0 7 9 16 4]", zeros)
	}
}

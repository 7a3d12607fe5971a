package forwardsig_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/caddy-seckill/caddy-seckill/forwardsig"
)

// A shop's order API behind `seckill { forward }` and reverse_proxy: it trusts the Seckill-*
// headers only once they verify under the Caddyfile's forward_secret and were signed within the
// window (here 2 minutes; DefaultWindow without Within). It takes the quantity from Seckill-Qty,
// never from the body. The reservation id is unique per win, so it is also the key that makes a
// repeated delivery, or a replay within the window, harmless (insert the order ON CONFLICT
// (reservation) DO NOTHING).
func Example() {
	secret := []byte("the forward_secret of the Caddyfile")
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		win, ok := forwardsig.Verify(r.Header, secret, forwardsig.Within(2*time.Minute))
		if !ok {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		fmt.Fprintf(w, "order %s: %d of %s for %s", win.Reservation, win.Qty, win.Activity, win.User)
	})

	// What the edge does to a winner's request before passing it on.
	r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"qty":1}`))
	forwardsig.Set(r.Header, secret, forwardsig.Win{
		Reservation: "1795958876709-0", Activity: "phone-1001", User: "alice", Qty: 1,
	})
	w := httptest.NewRecorder()
	orders.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Body.String())

	// A changed header (here the quantity) no longer verifies.
	r.Header.Set(forwardsig.HeaderQty, "2")
	w = httptest.NewRecorder()
	orders.ServeHTTP(w, r)
	fmt.Println(w.Code)
	// Output:
	// 200 order 1795958876709-0: 1 of phone-1001 for alice
	// 403
}

// The message signed for reservation "r1", activity "a", user "u" and quantity 2 at Unix time
// 1700000000 (Seckill-Timestamp) is "2:v2,2:r1,1:a,1:u,1:2,10:1700000000,"; a service in another
// language checks its implementation against
// `printf '2:v2,2:r1,1:a,1:u,1:2,10:1700000000,' | openssl dgst -sha256 -hmac k`.
func ExampleSign() {
	w := forwardsig.Win{Reservation: "r1", Activity: "a", User: "u", Qty: 2}
	fmt.Println(forwardsig.Sign([]byte("k"), w, time.Unix(1700000000, 0)))
	// Output: 890c56d28efdc73e158b52e1d4d8f612d889fd8d081afb985af5d3b3ae2ad27f
}

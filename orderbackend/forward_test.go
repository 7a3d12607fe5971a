package orderbackend

import (
	"errors"
	"net/http"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/caddymodule/forwardsig"
)

func TestSignForwardedKnownVector(t *testing.T) {
	// HMAC-SHA256("k", "2:v1,2:r1,1:a,1:u,1:2,"), computed independently:
	//   printf '2:v1,2:r1,1:a,1:u,1:2,' | openssl dgst -sha256 -hmac k
	const want = "50bea11ecbe2d1fc35cf272e69993c9e225172357fbf485ddf5d930807aca9ea"
	if got := SignForwarded([]byte("k"), Forwarded{Reservation: "r1", Activity: "a", User: "u", Qty: 2}); got != want {
		t.Fatalf("SignForwarded = %s, want %s", got, want)
	}
}

func TestVerifySignature(t *testing.T) {
	secret := []byte("forward-secret")
	win := Forwarded{Reservation: "1795958876709-0", Activity: "phone-1001", User: "alice", Qty: 1}
	// Signed the way the edge signs a forwarded winner.
	h := http.Header{}
	forwardsig.Set(h, secret, forwardsig.Win(win))
	if h.Get(HeaderSignature) != SignForwarded(secret, win) {
		t.Fatal("the edge and SignForwarded disagree")
	}
	got, err := VerifySignature(secret, h)
	if err != nil || got != win {
		t.Fatalf("VerifySignature = %+v, %v", got, err)
	}
	if _, err := VerifySignature([]byte("other"), h); !errors.Is(err, ErrBadSignature) {
		t.Errorf("another secret: err = %v", err)
	}
	if _, err := VerifySignature(nil, h); !errors.Is(err, ErrBadSignature) {
		t.Errorf("no secret: err = %v", err)
	}
	for _, tamper := range []struct{ header, value string }{
		{HeaderReservation, "other"}, {HeaderActivity, "phone-1002"}, {HeaderUser, "mallory"}, {HeaderQty, "2"},
		{HeaderQty, "-1"}, {HeaderSignature, ""}, {HeaderSignature, "not hex"},
	} {
		c := h.Clone()
		c.Set(tamper.header, tamper.value)
		if _, err := VerifySignature(secret, c); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s=%q verified (err %v)", tamper.header, tamper.value, err)
		}
	}
	c := h.Clone()
	c.Del(HeaderUser)
	if _, err := VerifySignature(secret, c); !errors.Is(err, ErrBadSignature) {
		t.Errorf("missing user verified (err %v)", err)
	}
}

package orderbackend

import (
	"errors"
	"net/http"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/forwardsig"
)

func TestVerifySignature(t *testing.T) {
	secret := []byte("forward-secret")
	win := forwardsig.Win{Reservation: "1795958876709-0", Activity: "phone-1001", User: "alice", Qty: 1}
	// Signed the way the edge signs a forwarded winner.
	h := http.Header{}
	forwardsig.Set(h, secret, win)
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
	// A header signed under the empty key is refused too, not only a missing secret.
	empty := http.Header{}
	forwardsig.Set(empty, nil, win)
	if _, err := VerifySignature(nil, empty); !errors.Is(err, ErrBadSignature) {
		t.Errorf("signed under the empty key: err = %v", err)
	}
	for _, tamper := range []struct{ header, value string }{
		{forwardsig.HeaderReservation, "other"}, {forwardsig.HeaderQty, "-1"}, {forwardsig.HeaderSignature, "not hex"},
	} {
		c := h.Clone()
		c.Set(tamper.header, tamper.value)
		if _, err := VerifySignature(secret, c); !errors.Is(err, ErrBadSignature) {
			t.Errorf("%s=%q verified (err %v)", tamper.header, tamper.value, err)
		}
	}
}

package forwardsig

import (
	"net/http"
	"testing"
)

func TestSignKnownVector(t *testing.T) {
	// The documented message for this win is "2:v1,2:r1,1:a,1:u,1:2,"; the value below is
	// HMAC-SHA256("k", that message), computed independently with openssl:
	//   printf '2:v1,2:r1,1:a,1:u,1:2,' | openssl dgst -sha256 -hmac k
	const want = "50bea11ecbe2d1fc35cf272e69993c9e225172357fbf485ddf5d930807aca9ea"
	if got := Sign([]byte("k"), Win{Reservation: "r1", Activity: "a", User: "u", Qty: 2}); got != want {
		t.Fatalf("Sign = %s, want %s", got, want)
	}
}

func TestSetVerify(t *testing.T) {
	secret := []byte("secret")
	w := Win{Reservation: "r-1", Activity: "phone-1001", User: "alice", Qty: 1}
	h := http.Header{}
	Set(h, secret, w)
	got, ok := Verify(h, secret)
	if !ok || got != w {
		t.Fatalf("Verify = %+v, %v; want %+v, true", got, ok, w)
	}
	if _, ok := Verify(h, []byte("other")); ok {
		t.Fatal("verified under another secret")
	}
	for _, tamper := range []struct{ header, value string }{
		{HeaderReservation, "r-2"}, {HeaderActivity, "x"}, {HeaderUser, "mallory"}, {HeaderQty, "2"},
		{HeaderQty, "0"}, {HeaderQty, "x"}, {HeaderSignature, "zz"}, {HeaderSignature, ""}, {HeaderUser, ""},
	} {
		c := h.Clone()
		c.Set(tamper.header, tamper.value)
		if _, ok := Verify(c, secret); ok {
			t.Errorf("verified with %s: %q", tamper.header, tamper.value)
		}
	}
	// Field boundaries are part of the message: moving a character between fields changes it.
	a := Sign(secret, Win{Reservation: "ab", Activity: "c", User: "u", Qty: 1})
	b := Sign(secret, Win{Reservation: "a", Activity: "bc", User: "u", Qty: 1})
	if a == b {
		t.Fatal("field boundaries are not signed")
	}
}

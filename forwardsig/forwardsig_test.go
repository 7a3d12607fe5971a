package forwardsig

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestSignKnownVector(t *testing.T) {
	// The documented message for this win is "2:v2,2:r1,1:a,1:u,1:2,10:1700000000,"; the value
	// below is HMAC-SHA256("k", that message), computed independently with openssl:
	//   printf '2:v2,2:r1,1:a,1:u,1:2,10:1700000000,' | openssl dgst -sha256 -hmac k
	const want = "890c56d28efdc73e158b52e1d4d8f612d889fd8d081afb985af5d3b3ae2ad27f"
	w := Win{Reservation: "r1", Activity: "a", User: "u", Qty: 2}
	if got := Sign([]byte("k"), w, time.Unix(1700000000, 0)); got != want {
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
	ts, _ := strconv.ParseInt(h.Get(HeaderTimestamp), 10, 64)
	for _, tamper := range []struct{ header, value string }{
		{HeaderReservation, "r-2"}, {HeaderActivity, "x"}, {HeaderUser, "mallory"}, {HeaderQty, "2"},
		{HeaderQty, "0"}, {HeaderQty, "x"}, {HeaderSignature, "zz"}, {HeaderSignature, ""}, {HeaderUser, ""},
		{HeaderTimestamp, strconv.FormatInt(ts-1, 10)}, {HeaderTimestamp, ""}, {HeaderTimestamp, "x"},
	} {
		c := h.Clone()
		c.Set(tamper.header, tamper.value)
		if _, ok := Verify(c, secret); ok {
			t.Errorf("verified with %s: %q", tamper.header, tamper.value)
		}
	}
	// Field boundaries are part of the message: moving a character between fields changes it.
	at := time.Unix(1700000000, 0)
	a := Sign(secret, Win{Reservation: "ab", Activity: "c", User: "u", Qty: 1}, at)
	b := Sign(secret, Win{Reservation: "a", Activity: "bc", User: "u", Qty: 1}, at)
	if a == b {
		t.Fatal("field boundaries are not signed")
	}
}

// A request captured and replayed after the window is refused, however well signed; so is one
// stamped too far in the future (a clock that runs ahead must not stretch the window).
func TestVerifyRefusesReplay(t *testing.T) {
	secret := []byte("secret")
	w := Win{Reservation: "r-1", Activity: "phone-1001", User: "alice", Qty: 1}
	signed := time.Unix(1700000000, 0)
	h := http.Header{}
	setAt(h, secret, w, signed)
	clock := func(d time.Duration) Option { return Clock(func() time.Time { return signed.Add(d) }) }

	for _, c := range []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"at once", []Option{clock(0)}, true},
		{"at the edge of the default window", []Option{clock(DefaultWindow)}, true},
		{"after the default window", []Option{clock(DefaultWindow + time.Second)}, false},
		{"a day later", []Option{clock(24 * time.Hour)}, false},
		{"from the future", []Option{clock(-DefaultWindow - time.Second)}, false},
		{"within a wider window", []Option{clock(time.Hour), Within(2 * time.Hour)}, true},
		{"after a narrower window", []Option{clock(31 * time.Second), Within(30 * time.Second)}, false},
		{"zero window keeps the default", []Option{clock(time.Minute), Within(0)}, true},
	} {
		if _, ok := Verify(h, secret, c.opts...); ok != c.ok {
			t.Errorf("%s: verified = %v, want %v", c.name, ok, c.ok)
		}
	}
}

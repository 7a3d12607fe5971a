package admission

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// randomResultString draws a string that is usually a plain id and sometimes holds what
// encoding/json escapes or replaces: quotes, backslashes, HTML characters, control characters,
// U+2028, non-ASCII and invalid UTF-8.
func randomResultString(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		return ""
	}
	pieces := []string{"a", "Z", "0", "9", "-", "_", ":", " ", "~", "1764441234567-0", "o-17",
		`"`, `\`, "<", ">", "&", "\n", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "\xff", "\xe2\x80"}
	n := 1 + r.IntN(6)
	s := ""
	for range n {
		if r.IntN(3) == 0 {
			s += pieces[r.IntN(len(pieces))]
		} else {
			s += pieces[r.IntN(10)] // the plain ones
		}
	}
	return s
}

// TestResultJSONMatchesEncodingJSON checks AppendResultJSON against json.Marshal on random
// records, and that parseResultJSON takes the fast path for every record with a known code and
// plain strings (which is what the stores write) and reads it back exactly.
func TestResultJSONMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	codes := []string{"queued", "pending_payment", "paid", "cancelled", "failed", "none", "", "other", `q"d`}
	fast := 0
	for i := range 20000 {
		rec := Result{
			Code:          codes[r.IntN(len(codes))],
			ReservationID: randomResultString(r),
			OrderID:       randomResultString(r),
		}
		switch r.IntN(4) {
		case 1:
			rec.PayBeforeMS = r.Int64()
		case 2:
			rec.PayBeforeMS = -r.Int64N(1 << 40)
		case 3:
			rec.PayBeforeMS = r.Int64N(1e18)
		}
		if r.IntN(8) == 0 { // a user with several reservations
			for range 1 + r.IntN(3) {
				rec.Reservations = append(rec.Reservations, Result{Code: codes[r.IntN(len(codes))],
					ReservationID: randomResultString(r), OrderID: randomResultString(r), PayBeforeMS: r.Int64N(1e13)})
			}
		}
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendResultJSON([]byte("x"), rec)
		if string(got) != "x"+string(want) {
			t.Fatalf("#%d %+v: AppendResultJSON = %s, json.Marshal = %s", i, rec, got[1:], want)
		}
		_, known := resultCode(rec.Code)
		plain := plainJSON(rec.ReservationID) && plainJSON(rec.OrderID)
		digits := rec.PayBeforeMS < 1e18 && rec.PayBeforeMS > -1e18
		back, ok := parseResultJSON(string(want))
		if want := known && plain && digits && rec.Reservations == nil; ok != want {
			t.Fatalf("#%d %s: fast path %v, want %v", i, got[1:], ok, want)
		}
		if ok {
			fast++
			if !back.Equal(rec) {
				t.Fatalf("#%d %s: parsed %+v", i, want, back)
			}
		}
	}
	if fast < 1000 {
		t.Fatalf("only %d records took the fast path: the generator is off", fast)
	}
}

// FuzzResultJSON checks, for any stored text, that the fast path accepts only encoding/json's own
// encoding of what encoding/json decodes from it, and that a poll's answer (AppendStoredResult)
// and GetResult's record (DecodeResult) are what decoding and encoding again give.
func FuzzResultJSON(f *testing.F) {
	for _, s := range []string{
		`{"code":"queued","reservation_id":"1764441234567-0"}`,
		`{"code":"pending_payment","reservation_id":"1-0","order_id":"o-1","pay_before_ms":1764441234567}`,
		`{"code":"paid","pay_before_ms":-5}`,
		`{"code":"paid","pay_before_ms":0}`,
		`{"code":"paid","pay_before_ms":01}`,
		`{"code":"none"}`,
		`{"code":"none","order_id":""}`,
		`{"code":"queued","reservation_id":"a\u003cb"}`,
		`{"code":"queued", "reservation_id":"1-0"}`,
		`{"reservation_id":"1-0","code":"queued"}`,
		`{"code":"queued","code":"paid"}`,
		`{"code":"queued"}x`,
		`{"code":"queued","pay_before_ms":99999999999999999999}`,
		`{"code":"queued","pay_before_ms":999999999999999999}`,
		`{"CODE":"queued"}`,
		`null`,
		``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var want Result
		werr := json.Unmarshal([]byte(v), &want)
		if r, ok := parseResultJSON(v); ok {
			if werr != nil || !r.Equal(want) {
				t.Fatalf("fast path read %q as %+v; encoding/json: %+v, %v", v, r, want, werr)
			}
			if enc, _ := json.Marshal(want); string(enc) != v {
				t.Fatalf("fast path took %q, which is not encoding/json's %s", v, enc)
			}
		}
		got, code, err := AppendStoredResult([]byte("p"), v)
		r, derr := DecodeResult(v)
		if werr != nil {
			if err == nil || derr == nil {
				t.Fatalf("%q does not decode (%v), yet AppendStoredResult gave %q, %v and DecodeResult %+v, %v", v, werr, got, err, r, derr)
			}
			return
		}
		enc, _ := json.Marshal(want)
		if err != nil || string(got) != "p"+string(enc) || code != want.Code {
			t.Fatalf("AppendStoredResult(%q) = %q, %q, %v; want %q, %q", v, got, code, err, "p"+string(enc), want.Code)
		}
		if derr != nil || !r.Equal(want) {
			t.Fatalf("DecodeResult(%q) = %+v, %v; want %+v", v, r, derr, want)
		}
	})
}

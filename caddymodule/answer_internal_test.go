package caddymodule

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
)

// TestBuyAnswerEncoding checks appendBuyAnswer against what encoding/json's Encoder (writeJSON)
// writes for the same answer, byte for byte, for reservation ids that need no escaping and ids
// that do.
func TestBuyAnswerEncoding(t *testing.T) {
	type buyAnswer struct {
		Code          string `json:"code"`
		ReservationID string `json:"reservation_id"`
		Remaining     int64  `json:"remaining"`
	}
	ids := []string{
		"", "r", "0193f1c2-7a4b-7c3d-9e8f-0123456789ab", "a-long-idempotency-key-0123456789~!#$%*()_+=",
		`q"uote`, `back\slash`, "<b>&amp;</b>", "tab\there", "nl\n", "\x00\x1f\x7f", "é", "\xff\xfe",
		"\u2028\u2029", "ok ok",
	}
	for _, id := range ids {
		for _, rem := range []int64{0, 1, 42, -1, 999_999_999, math.MaxInt64, math.MinInt64} {
			var want bytes.Buffer
			if err := json.NewEncoder(&want).Encode(buyAnswer{Code: codeQueued, ReservationID: id, Remaining: rem}); err != nil {
				t.Fatal(err)
			}
			if got := appendBuyAnswer([]byte("x"), id, rem); string(got) != "x"+want.String() {
				t.Errorf("id %q, remaining %d:\n got %q\nwant %q", id, rem, got[1:], want.String())
			}
		}
	}
}

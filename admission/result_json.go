package admission

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The result record's JSON. Buyers poll their result many times per win, and the edge answers
// each poll with the record as JSON. redisstore.Store keeps the record as JSON already (admit.lua writes
// a winner's, SetResult the order backend's), in the very encoding encoding/json gives a Result,
// which is also the edge's answer. So a poll can hand the stored text on (Store.AppendResult)
// instead of decoding it into a Result and encoding that again. AppendResultJSON writes that
// encoding without reflection, and parseResultJSON recognizes it; anything else (an escape, a
// field order or spacing of another writer) goes through encoding/json, so the answer is always
// encoding/json's encoding of the record (TestResultJSONMatchesEncodingJSON, FuzzResultJSON).

// AppendResultJSON appends r as json.Marshal encodes it.
func AppendResultJSON(dst []byte, r Result) []byte {
	dst = append(dst, `{"code":`...)
	dst = AppendJSONString(dst, r.Code)
	if r.ReservationID != "" {
		dst = append(dst, `,"reservation_id":`...)
		dst = AppendJSONString(dst, r.ReservationID)
	}
	if r.OrderID != "" {
		dst = append(dst, `,"order_id":`...)
		dst = AppendJSONString(dst, r.OrderID)
	}
	if r.PayBeforeMS != 0 {
		dst = append(dst, `,"pay_before_ms":`...)
		dst = strconv.AppendInt(dst, r.PayBeforeMS, 10)
	}
	if len(r.Reservations) > 0 {
		dst = append(dst, `,"reservations":[`...)
		for i, e := range r.Reservations {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendResultJSON(dst, e)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// AppendJSONString appends s as a JSON string, as encoding/json writes it: verbatim between quotes
// when no byte needs an escape, else through encoding/json (rare: ids are plain ASCII).
func AppendJSONString(dst []byte, s string) []byte {
	if !plainJSON(s) {
		b, _ := json.Marshal(s) // a string always encodes
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// plainJSON reports whether encoding/json writes s verbatim inside quotes: printable ASCII
// without the quote, the backslash and the characters it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// ResultCodes returns the result words buyers poll (see Result.Code), the one list of them: a
// store may keep a code as its index here.
func ResultCodes() [6]string {
	return [...]string{"queued", "pending_payment", "paid", "cancelled", "failed", "none"}
}

// resultCode returns the constant for one of the result words (see Result.Code), so that a
// record parsed from a reply does not keep a copy of its code.
func resultCode(s string) (string, bool) {
	for _, c := range ResultCodes() {
		if s == c {
			return c, true
		}
	}
	return "", false
}

// validResultCode accepts the result words buyers poll (see Result.Code): SetResult's check in
// both stores, from the one list parseResultJSON reads.
func validResultCode(c string) bool {
	_, ok := resultCode(c)
	return ok
}

// parseResultJSON reads v when it is exactly AppendResultJSON's encoding of a record with a known
// code and plain strings; ok is false for anything else, which the caller decodes with
// encoding/json. The strings of r are substrings of v.
func parseResultJSON(v string) (r Result, ok bool) {
	rest, ok := strings.CutPrefix(v, `{"code":"`)
	if !ok {
		return Result{}, false
	}
	code, rest, ok := strings.Cut(rest, `"`)
	if !ok {
		return Result{}, false
	}
	if r.Code, ok = resultCode(code); !ok {
		return Result{}, false
	}
	if rest, ok = strings.CutPrefix(rest, `,"reservation_id":"`); ok {
		if r.ReservationID, rest, ok = plainField(rest); !ok {
			return Result{}, false
		}
	}
	if rest, ok = strings.CutPrefix(rest, `,"order_id":"`); ok {
		if r.OrderID, rest, ok = plainField(rest); !ok {
			return Result{}, false
		}
	}
	if rest, ok = strings.CutPrefix(rest, `,"pay_before_ms":`); ok {
		end := strings.IndexByte(rest, '}')
		if end < 0 || !canonicalInt(rest[:end]) {
			return Result{}, false
		}
		// canonicalInt allows at most 18 digits: the number fits an int64.
		r.PayBeforeMS, _ = strconv.ParseInt(rest[:end], 10, 64)
		rest = rest[end:]
	}
	if rest != "}" {
		return Result{}, false
	}
	return r, true
}

// plainField reads a non-empty plain string (plainJSON) up to its closing quote, which s must
// contain; it returns the string and what follows the quote.
func plainField(s string) (field, rest string, ok bool) {
	field, rest, ok = strings.Cut(s, `"`)
	if !ok || field == "" || !plainJSON(field) {
		return "", "", false
	}
	return field, rest, true
}

// canonicalInt reports whether s is a non-zero integer of at most 18 digits as strconv writes it:
// an optional minus, no leading zero.
func canonicalInt(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || len(digits) > 18 || digits[0] == '0' {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// DecodeResult reads a stored record: parseResultJSON's fast path, or encoding/json for any other
// spelling.
func DecodeResult(v string) (Result, error) {
	if r, ok := parseResultJSON(v); ok {
		return r, nil
	}
	var r Result
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return Result{}, err
	}
	return r, nil
}

// AppendStoredResult appends a stored record to dst in AppendResultJSON's encoding and returns
// its code: the stored text itself when it already is that encoding, else the record re-encoded.
func AppendStoredResult(dst []byte, v string) ([]byte, string, error) {
	if r, ok := parseResultJSON(v); ok {
		return append(dst, v...), r.Code, nil
	}
	var r Result
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return dst, "", err
	}
	return AppendResultJSON(dst, r), r.Code, nil
}

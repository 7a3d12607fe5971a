package caddymodule

import (
	"strings"
	"testing"
)

// TestJSONErrorWords: a body the buy and path calls cannot decode is refused with the contract's
// words (the JSON field and the value it wants), never Go's names for them.
func TestJSONErrorWords(t *testing.T) {
	for _, tc := range []struct {
		body string
		into any
		want string
	}{
		{`{"qty": "2"}`, new(buyRequest), "qty must be a whole number, not a string"},
		{`{"qty": 1.5}`, new(buyRequest), "qty must be a whole number, not 1.5"},
		{`{"qty": true}`, new(buyRequest), "qty must be a whole number, not true or false"},
		{`{"qty": [1]}`, new(buyRequest), "qty must be a whole number, not an array"},
		{`{"captcha_id": 5, "answer": "1234"}`, new(pathRequest), "captcha_id must be a string, not a number"},
		{`{"captcha_id": "c", "answer": {}}`, new(pathRequest), "answer must be a string, not an object"},
		{`[1, 2]`, new(buyRequest), "the body must be a JSON object"},
		{`"qty"`, new(pathRequest), "the body must be a JSON object"},
		{`{"qty": 1`, new(buyRequest), "the body is not valid JSON: it ends too soon"},
		{`{"qty": x}`, new(buyRequest), "the body is not valid JSON: invalid character 'x' looking for beginning of value"},
		{`{"qty": 1} {}`, new(buyRequest), "the body has data after its JSON object"},
	} {
		err := decodeJSON([]byte(tc.body), tc.into)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
			continue
		}
		for _, goName := range []string{"Request", "Go ", "int64", "struct"} {
			if strings.Contains(err.Error(), goName) {
				t.Errorf("%s: %q names Go's %q", tc.body, err, goName)
			}
		}
	}
}

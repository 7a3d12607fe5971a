package caddymodule

import (
	"strconv"
	"strings"
)

// placeholderClaimsPrefix starts the placeholders of a verified token's top-level claims:
// {http.seckill.claims.role}.
const placeholderClaimsPrefix = "http.seckill.claims."

// claimPlaceholder answers {http.seckill.claims.<name>} through the replacer's Map: a claim is
// formatted only when a placeholder asks for it, which most requests never do. Every such
// placeholder is known, so that none is left as literal text in a body or a header: it is empty
// until a token verified, and for a claim the token lacks or that has no flat form. Only claims
// are exposed, never the token.
func (q *request) claimPlaceholder(key string) (any, bool) {
	name, ok := strings.CutPrefix(key, placeholderClaimsPrefix)
	if !ok {
		return nil, false
	}
	if q.user == "" { // no verified token (a verified one always names a user)
		return "", true
	}
	q.claimOnce.Do(func() {
		// An error is unreachable: the same payload was decoded when the token verified.
		q.claimMap, _ = q.claims.Map()
	})
	s, _ := claimString(q.claimMap[name])
	return s, true
}

// claimString formats a claim's value for a placeholder: a string as is, a number or a boolean in
// its JSON form, an array of those joined by commas. Objects, nulls and arrays holding anything
// else have no flat form: false.
func claimString(v any) (string, bool) {
	if s, ok := scalarString(v); ok {
		return s, true
	}
	arr, ok := v.([]any)
	if !ok {
		return "", false
	}
	var b strings.Builder
	for i, e := range arr {
		s, ok := scalarString(e)
		if !ok {
			return "", false
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	return b.String(), true
}

// scalarString formats a string, number or boolean as decoded from JSON. Numbers are float64:
// jwtauth.Claims.Map decodes without UseNumber, so no json.Number ever reaches here.
func scalarString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case float64:
		// The shortest 'f' form writes 1767225600, not 1.7672256e+09: timestamps and numeric ids
		// read as they were written.
		return strconv.FormatFloat(v, 'f', -1, 64), true
	}
	return "", false
}

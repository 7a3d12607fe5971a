package caddymodule

import "testing"

// TestClaimString checks the flat form of each JSON claim type.
func TestClaimString(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
		ok   bool
	}{
		{"string", "admin", "admin", true},
		{"empty string", "", "", true},
		{"integer", float64(42), "42", true},
		{"timestamp", float64(1767225600), "1767225600", true},
		{"negative fraction", -0.25, "-0.25", true},
		{"huge", 1e21, "1000000000000000000000", true},
		{"true", true, "true", true},
		{"false", false, "false", true},
		{"strings", []any{"a", "b"}, "a,b", true},
		{"scalars", []any{float64(1), "x", true}, "1,x,true", true},
		{"empty array", []any{}, "", true},
		{"null", nil, "", false},
		{"object", map[string]any{"a": "b"}, "", false},
		{"array with an object", []any{"a", map[string]any{}}, "", false},
		{"array with an array", []any{[]any{"a"}}, "", false},
		{"array with a null", []any{"a", nil}, "", false},
	} {
		got, ok := claimString(tc.v)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: claimString(%#v) = %q, %v; want %q, %v", tc.name, tc.v, got, ok, tc.want, tc.ok)
		}
	}
}

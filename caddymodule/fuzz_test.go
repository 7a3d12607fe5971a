package caddymodule

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// FuzzParseQty: the buy body parser never panics, and accepts only a quantity from 1 to the limit.
func FuzzParseQty(f *testing.F) {
	for _, s := range []string{"", " ", "{}", `{"qty":1}`, `{"qty":3}`, `{"qty":0}`, `{"qty":-1}`,
		`{"qty":1e3}`, `{"qty":"1"}`, `{"qty":null}`, `{"qty":1}{}`, `[1]`, `{"qty":9223372036854775807}`, "{"} {
		f.Add([]byte(s), int64(3))
	}
	f.Fuzz(func(t *testing.T, body []byte, limit int64) {
		if limit < 1 {
			limit = 1
		}
		qty, e := parseQty(body, limit)
		if e == nil && (qty < 1 || qty > limit) {
			t.Fatalf("parseQty(%q, %d) = %d without an error", body, limit, qty)
		}
		if e != nil && e.Status != 400 {
			t.Fatalf("parseQty(%q) refused with status %d, want 400", body, e.Status)
		}
	})
}

// FuzzCaddyfile: adapting any Caddyfile that mentions this plugin's options and directives never
// panics; a wrong one is an error, never a crash at start-up.
func FuzzCaddyfile(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.caddyfiletest"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		in, _, _ := strings.Cut(string(b), "----------")
		f.Add(in)
	}
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		f.Fatal("caddyfile adapter not registered")
	}
	f.Fuzz(func(t *testing.T, in string) {
		_, _, _ = adapter.Adapt([]byte(in), nil)
	})
}

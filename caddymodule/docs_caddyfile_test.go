package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	caddyfmt "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// docFence matches a fenced block of a Markdown file: its indentation, its language and its body.
var docFence = regexp.MustCompile("(?ms)^([ \t]*)```([a-z]*)\n(.*?)^[ \t]*```[ \t]*$")

// docFiles are the Markdown files whose Caddyfile snippets TestDocsCaddyfiles checks: the README,
// docs/*.md and every package's README, relative to this package.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != ".." && strings.HasPrefix(d.Name(), "."):
			return filepath.SkipDir
		case !d.IsDir() && d.Name() == "README.md":
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestDocsCaddyfiles checks every ```caddyfile block of the docs: it is as `caddy fmt` writes it
// (caddyfmt.Format), and a whole configuration (one that opens with the global options or a site
// address) adapts. The syntax blocks of the reference (<!-- syntax: ... -->) are the parsers'
// doc comments, checked by TestReference, not configurations. A block of the docs that is a
// Caddyfile must say so (```caddyfile), or it is not checked: an unmarked block that looks like
// one fails the test.
func TestDocsCaddyfiles(t *testing.T) {
	t.Setenv("SECKILL_JWT_SECRET", "docs-test-jwt-secret-0123456789abcdef")
	t.Setenv("SECKILL_URL_SECRET", "docs-test-url-secret")
	checked := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		for _, m := range docFence.FindAllStringSubmatchIndex(text, -1) {
			indent, lang, body := text[m[2]:m[3]], text[m[4]:m[5]], text[m[6]:m[7]]
			where := file + ":" + strconv.Itoa(strings.Count(text[:m[0]], "\n")+1)
			if indent != "" {
				body = strings.ReplaceAll("\n"+body, "\n"+indent, "\n")[1:]
			}
			if lang == "" && looksLikeCaddyfile(body) {
				t.Errorf("%s: an unmarked block that looks like a Caddyfile: mark it ```caddyfile", where)
				continue
			}
			if lang != "caddyfile" || strings.HasSuffix(strings.TrimSpace(text[:m[0]]), "-->") {
				continue
			}
			checked++
			if got := string(caddyfmt.Format([]byte(body))); got != body {
				t.Errorf("%s: not as `caddy fmt` writes it; it would be:\n%s", where, got)
			}
			if wholeConfig(body) {
				if _, err := adaptDoc(body); err != nil {
					t.Errorf("%s: does not adapt: %v", where, err)
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("only %d Caddyfile blocks found in the docs", checked)
	}
}

// looksLikeCaddyfile reports whether an unmarked block's first line opens a Caddyfile block, as
// a global options block, a site or a directive does ("{", ":8080 {", "route /x/* {").
func looksLikeCaddyfile(body string) bool {
	first, _, _ := strings.Cut(body, "\n")
	return strings.HasSuffix(strings.TrimSpace(first), "{")
}

// wholeConfig reports whether a Caddyfile snippet is a configuration of its own: its first line
// (after comments) is the global options block or a site address.
func wholeConfig(body string) bool {
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return line == "{" || strings.HasPrefix(line, ":") || strings.HasPrefix(line, "http") ||
			strings.HasPrefix(line, "localhost")
	}
	return false
}

// adaptDoc adapts a Caddyfile as `caddy adapt` does, warnings aside.
func adaptDoc(body string) ([]byte, error) {
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(body), map[string]any{"filename": "Caddyfile"})
	if err == nil && !json.Valid(out) {
		err = os.ErrInvalid
	}
	return bytes.TrimSpace(out), err
}

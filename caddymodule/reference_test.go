package caddymodule_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	gotoken "go/token"
	"os"
	"regexp"
	"strings"
	"testing"
)

// referenceBlocks are the Caddyfile blocks whose syntax README.md renders, each between
// <!-- syntax: <marker> --> and <!-- /syntax -->, from the doc comment of the function that parses
// it: the indented lines after "Syntax:". The doc comment is the one source; TestReference keeps
// the README equal to it.
var referenceBlocks = []struct {
	marker string // the README's marker name
	file   string // the Go file, relative to this package
	recv   string // the method's receiver type (without *), or "" for a function
	fn     string
}{
	{"global seckill", "caddyfile_app.go", "", "parseGlobalOption"},
	{"store memory", "../admission/localstore/caddyfile.go", "MemoryModule", "UnmarshalCaddyfile"},
	{"store local", "../admission/localstore/caddyfile.go", "Module", "UnmarshalCaddyfile"},
	{"store redis", "../admission/redisstore/caddyfile.go", "Module", "UnmarshalCaddyfile"},
	{"jwt", "caddyfile_jwt.go", "", "parseJWT"},
	{"captcha", "caddyfile_captcha.go", "", "parseCaptcha"},
	{"orders", "caddyfile_orders.go", "", "parseOrders"},
	{"payments mock", "../payments/mockpay/module.go", "Module", "UnmarshalCaddyfile"},
	{"payments stripe", "../payments/stripepay/module.go", "Module", "UnmarshalCaddyfile"},
	{"payments webhook", "../payments/webhookpay/module.go", "Module", "UnmarshalCaddyfile"},
	{"rate_limit", "caddyfile_ratelimit.go", "", "parseRateLimit"},
	{"activity", "caddyfile_activity.go", "", "parseActivity"},
	{"waiting_room", "caddyfile_waitroom.go", "", "parseWaitingRoom"},
	{"directive seckill", "caddyfile_handler.go", "Handler", "UnmarshalCaddyfile"},
	{"directive seckill_orders", "caddyfile_handler.go", "OrdersHandler", "UnmarshalCaddyfile"},
	{"directive seckill_demo_signin", "caddyfile_demo.go", "DemoSignin", "UnmarshalCaddyfile"},
}

// referenceFile is the README that renders the syntax blocks.
const referenceFile = "README.md"

// syntaxMarker matches one rendered block: its opening marker, its body and the closing marker.
var syntaxMarker = regexp.MustCompile(`(?s)<!-- syntax: ([^>]*?) -->\n(.*?)<!-- /syntax -->`)

// TestReference checks that every syntax block of README.md is the syntax in its parser's doc
// comment, and that each block of referenceBlocks is rendered once. With -update it rewrites the
// blocks from the doc comments (a block is added by writing its two markers, empty, where it
// belongs, then running -update).
func TestReference(t *testing.T) {
	want := map[string]string{}
	for _, b := range referenceBlocks {
		syntax, err := docSyntax(b.file, b.recv, b.fn)
		if err != nil {
			t.Fatalf("%s: %v", b.marker, err)
		}
		want[b.marker] = "```caddyfile\n" + syntax + "```\n"
	}

	data, err := os.ReadFile(referenceFile)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	seen := map[string]int{}
	var stale []string
	updated := syntaxMarker.ReplaceAllStringFunc(readme, func(block string) string {
		m := syntaxMarker.FindStringSubmatch(block)
		name, body := m[1], m[2]
		seen[name]++
		w, ok := want[name]
		if !ok {
			t.Errorf("%s: marker %q names no block of referenceBlocks", referenceFile, name)
			return block
		}
		if body != w {
			stale = append(stale, name)
			if !*update {
				t.Errorf("%s: the syntax of %q differs from its doc comment\n--- README.md:\n%s--- doc comment:\n%s",
					referenceFile, name, body, w)
			}
		}
		return "<!-- syntax: " + name + " -->\n" + w + "<!-- /syntax -->"
	})
	for _, b := range referenceBlocks {
		switch seen[b.marker] {
		case 0:
			t.Errorf("%s has no block %q: write <!-- syntax: %s --> and <!-- /syntax --> on two lines "+
				"where it belongs and run go test -run TestReference -update", referenceFile, b.marker, b.marker)
		case 1:
		default:
			t.Errorf("%s renders %q %d times; once is enough", referenceFile, b.marker, seen[b.marker])
		}
	}
	if *update && len(stale) > 0 {
		if err := os.WriteFile(referenceFile, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s: %s", referenceFile, strings.Join(stale, ", "))
	}
}

// docSyntax returns the syntax block of the doc comment of function fn (a method of recv when
// recv is not empty) in file: the tab-indented lines after the line ending in "Syntax:", each
// without its first tab, and each ending in a newline.
func docSyntax(file, recv, fn string) (string, error) {
	f, err := parser.ParseFile(gotoken.NewFileSet(), file, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return "", err
	}
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn || receiverName(fd) != recv {
			continue
		}
		if fd.Doc == nil {
			return "", fmt.Errorf("%s: %s has no doc comment", file, fn)
		}
		lines := strings.Split(fd.Doc.Text(), "\n")
		start := -1
		for i, l := range lines {
			if strings.HasSuffix(strings.TrimSpace(l), "Syntax:") {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return "", fmt.Errorf("%s: the doc comment of %s has no line ending in \"Syntax:\"", file, fn)
		}
		for start < len(lines) && lines[start] == "" {
			start++
		}
		var b strings.Builder
		for _, l := range lines[start:] {
			code, ok := strings.CutPrefix(l, "\t")
			if !ok {
				break
			}
			b.WriteString(code + "\n")
		}
		if b.Len() == 0 {
			return "", fmt.Errorf("%s: the doc comment of %s has no indented block after \"Syntax:\"", file, fn)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("%s: no func %s with receiver %q", file, fn, recv)
}

// receiverName is the receiver type's name of a method (without *), or "" for a function.
func receiverName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

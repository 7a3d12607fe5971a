package web

import (
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"testing"
)

// TestDockerImageLayout checks, without docker, what xcaddy.Dockerfile puts in the image for the
// Docker quick start (README.md, "Docker"): the page's files (exactly Files: no Go source or
// README for file_server to serve) in /srv/web, where Caddyfile.example's `root * web` finds them
// from the working directory /srv; Caddyfile.example as Caddy's config; ./seckill-data a volume;
// and a build context without the local binary and sale (.dockerignore).
func TestDockerImageLayout(t *testing.T) {
	df, err := os.ReadFile("../xcaddy.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	final := false // the lines after the last FROM: the image's own stage
	lines := map[string]bool{}
	for _, l := range strings.Split(string(df), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if f[0] == "FROM" {
			final, patterns, lines = !strings.Contains(l, " AS "), nil, map[string]bool{}
			continue
		}
		lines[strings.Join(f, " ")] = true
		if f[0] == "COPY" && len(f) > 2 && f[len(f)-1] == "/srv/web/" {
			patterns = append(patterns, f[1:len(f)-1]...)
		}
	}
	if !final {
		t.Fatal("xcaddy.Dockerfile: the last stage is named (AS): want the image's stage last")
	}
	for _, want := range []string{"WORKDIR /srv", "COPY Caddyfile.example /etc/caddy/Caddyfile", "VOLUME /srv/seckill-data"} {
		if !lines[want] {
			t.Errorf("xcaddy.Dockerfile's image stage lacks %q", want)
		}
	}

	copied := func(name string) bool {
		for _, p := range patterns {
			if ok, _ := path.Match(p, "web/"+name); ok {
				return true
			}
		}
		return false
	}
	var page []string
	err = fs.WalkDir(Files, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			page = append(page, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range page {
		if !copied(p) {
			t.Errorf("the page's %s is not copied into /srv/web (COPY patterns %v): it would 404", p, patterns)
		}
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if copied(e.Name()) && !slices.Contains(page, e.Name()) {
			t.Errorf("web/%s is copied into the image but is no file of the page: file_server would serve it", e.Name())
		}
	}

	di, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"bin/", "seckill-data/", ".git"} {
		if !slices.Contains(strings.Split(string(di), "\n"), want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
}

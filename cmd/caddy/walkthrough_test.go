package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
)

// TestMain removes the cmd/caddy that BuildCaddy built.
func TestMain(m *testing.M) { testcaddy.Main(m) }

// walkthroughBlock matches README.md's curl walkthrough: the fenced block after its marker.
var walkthroughBlock = regexp.MustCompile("(?s)<!-- walkthrough -->\n```sh\n(.*?)```\n")

// TestREADMEWalkthrough runs README.md's curl walkthrough as written, in a folder laid out as the
// checkout (bin/caddy, built from this one, and Caddyfile.example), against the gateway the
// README's first terminal starts (SECKILL_CAPTCHA=off, a new seckill-data). The example is the
// repository's with three changes for a shared test machine: free ports (GW names the gateway's,
// as the README says) and a sale opening 2 s after the start instead of 30 s. Run again on the
// same sale, the block must stop at the buy and print the refused answer.
func TestREADMEWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := walkthroughBlock.FindAllSubmatch(readme, -1)
	if len(m) != 1 {
		t.Fatalf("README.md has %d walkthrough blocks (<!-- walkthrough --> and a sh block), want 1", len(m))
	}
	block := string(m[0][1])

	example, err := os.ReadFile("../../Caddyfile.example")
	if err != nil {
		t.Fatal(err)
	}
	port, admin := testcaddy.FreePort(t), testcaddy.FreePort(t)
	config := string(example)
	for _, r := range []struct{ old, new string }{
		{"\n{\n", fmt.Sprintf("\n{\n\tadmin 127.0.0.1:%d\n\tdefault_bind 127.0.0.1\n", admin)},
		{"\n:8080 {\n", fmt.Sprintf("\n:%d {\n", port)},
		{"\t\t\tstart_in 30s\n", "\t\t\tstart_in 2s\n"},
	} {
		if strings.Count(config, r.old) != 1 {
			t.Fatalf("Caddyfile.example has %q %d times, want once", r.old, strings.Count(config, r.old))
		}
		config = strings.Replace(config, r.old, r.new, 1)
	}

	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testcaddy.BuildCaddy(t), filepath.Join(dir, "bin", "caddy")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile.example"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "gateway.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	gw := exec.Command(filepath.Join(dir, "bin", "caddy"), "run", "--config", "Caddyfile.example", "--adapter", "caddyfile")
	gw.Dir, gw.Stdout, gw.Stderr = dir, logFile, logFile
	gw.Env = append(os.Environ(), "SECKILL_CAPTCHA=off")
	status := fmt.Sprintf("http://127.0.0.1:%d/seckill/demo", port)
	p, err := proc.StartReady(gw, time.Minute, 100*time.Millisecond, proc.HTTPStatus(status, 200))
	if err != nil {
		log, _ := os.ReadFile(logFile.Name())
		t.Fatalf("gateway: %v\n%s", err, log)
	}
	t.Cleanup(func() { p.Stop(30 * time.Second) })

	run := func() (string, error) {
		sh := exec.Command("bash", "-c", block)
		sh.Dir = dir
		sh.Env = append(os.Environ(), fmt.Sprintf("GW=127.0.0.1:%d", port))
		out, err := sh.CombinedOutput()
		return string(out), err
	}
	began := time.Now()
	out, err := run()
	t.Logf("the walkthrough ran in %s", time.Since(began).Round(time.Millisecond))
	if err != nil || strings.Count(out, `"code":"paid"`) != 2 || !strings.Contains(out, `"code":"queued"`) {
		log, _ := os.ReadFile(logFile.Name())
		t.Fatalf("the walkthrough: %v\n%s\n--- gateway log ---\n%s", err, out, log)
	}
	// Caddyfile.example's user limit (2/s, burst 2) took the first run's path and buy calls: a
	// second at once may be refused at the path (429) before it reaches the buy.
	time.Sleep(time.Second)
	out, err = run()
	if err == nil || !strings.Contains(out, "refused: ") || !strings.Contains(out, `"code":"limit_reached"`) ||
		strings.Contains(out, `"code":"paid"`) {
		t.Fatalf("the walkthrough again on the same sale: %v, want it to stop at the refused buy\n%s", err, out)
	}
}

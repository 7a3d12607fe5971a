package caddymodule_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// startCaddyProcess runs the Caddy binary with the Caddyfile in a child process and returns the
// base URL once the activity's status answers.
func startCaddyProcess(t *testing.T, bin, seckill, site, activity string) string {
	t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(caddyfile(t, port, seckill, site)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "--config", cfg, "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	log, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }() // the child holds its own descriptor
	cmd.Stdout, cmd.Stderr = log, log
	// proc.Start: its own process group and a parent-death signal, so that a test binary that
	// dies does not leave its Caddy behind.
	p, err := proc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	err = p.WaitReady(context.Background(), 30*time.Second, 50*time.Millisecond, proc.HTTPStatus(base+"/seckill/"+activity, http.StatusOK))
	switch {
	case errors.Is(err, proc.ErrExited):
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("caddy exited at start:\n%s", out)
	case err != nil:
		out, _ := os.ReadFile(log.Name())
		t.Fatalf("caddy did not answer on %s:\n%s", base, out)
	}
	// Caddy listens with SO_REUSEPORT: a port taken by another process since FreePort would be
	// shared, and the answers would come from both.
	if err := proc.SoleListener(fmt.Sprintf("127.0.0.1:%d", port), p.Pid()); err != nil {
		t.Fatal(err)
	}
	return base
}

// TestTwoInstancesShareRedis runs one Caddy in this process and one in a child process, both on
// one private Redis, and rushes them together: the stock holds across nodes.
func TestTwoInstancesShareRedis(t *testing.T) {
	bin := buildCaddy(t)
	rd := testsrv.StartRedis(t)
	now := time.Now()
	seckill := jwtBlock + "captcha off\nurl_secret shared-url-secret\nstore redis " + rd.Addr + "\n" +
		activityBlock("duo", 50, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)
	a := startCaddy(t, seckill, route)
	b := startCaddyProcess(t, bin, seckill, route, "duo")
	rush(t, []string{a, b}, "duo", 400, 3, 50)
	if n := remaining(t, "duo"); n != 0 {
		t.Errorf("remaining %d after the rush, want 0", n)
	}
}

// TestDistributedUserLimit: with "distributed", a user's budget is shared by the nodes, so a call
// on a second node that its own local bucket would allow is refused.
func TestDistributedUserLimit(t *testing.T) {
	bin := buildCaddy(t)
	rd := testsrv.StartRedis(t)
	now := time.Now()
	seckill := jwtBlock + "captcha off\nurl_secret shared-url-secret\nstore redis " + rd.Addr + "\n" +
		"rate_limit user 1/m burst 1 distributed\n" +
		activityBlock("dl", 5, 1, now.Add(-time.Minute), now.Add(time.Hour), 0)
	a := newClient(t, startCaddy(t, seckill, route))
	b := newClient(t, startCaddyProcess(t, bin, seckill, route, "dl"))
	alice, bob := token(t, "alice"), token(t, "bob")
	expect(t, "alice on a", a.Post("/seckill/dl/path", alice, ""), http.StatusOK, "ok")
	r := b.Post("/seckill/dl/path", alice, "")
	expect(t, "alice on b", r, http.StatusTooManyRequests, "rate_limited")
	if r.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	expect(t, "bob on b", b.Post("/seckill/dl/path", bob, ""), http.StatusOK, "ok")
}

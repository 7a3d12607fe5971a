package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// startBenchGateway starts the gateway binary with the bench's config (gateway-config) on listen,
// its admin endpoint on admin, and returns it once the first activity answers.
func startBenchGateway(t *testing.T, caddy, listen, admin, secret string) *proc.Proc {
	t.Helper()
	dir := t.TempDir()
	var conf, errOut bytes.Buffer
	if code := cli(context.Background(), []string{"gateway-config", "-activities", "2", "-stock", "5", "-listen", listen,
		"-admin-listen", admin, "-jwt-secret", secret}, &conf, &errOut); code != exitOK {
		t.Fatalf("gateway-config: exit %d: %s", code, errOut.String())
	}
	path := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(path, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = log.Close() }() // the child holds its own descriptor
	cmd := exec.Command(caddy, "run", "--config", path, "--adapter", "caddyfile")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
	p, err := proc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(10 * time.Second) })
	// Ready when it holds a socket on the port and the port answers: a leftover's answer alone
	// says nothing of this one.
	answers := proc.HTTPStatus("http://"+listen+"/seckill/bench-0", 200)
	ready := func() error {
		ls, err := proc.Listeners(listen)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if slices.Contains(l.Pids, p.Pid()) {
				return answers()
			}
		}
		return fmt.Errorf("pid %d does not listen on %s yet", p.Pid(), listen)
	}
	if err := p.WaitReady(context.Background(), 30*time.Second, 50*time.Millisecond, ready); err != nil {
		t.Fatalf("gateway on %s: %v\n%s", listen, err, proc.Tail(log.Name(), 20))
	}
	return p
}

// TestLeftoverGatewayOnPort: a gateway left running on a port, and a second one started on the
// same port, which Caddy's SO_REUSEPORT lets bind. check-port refuses the port before the start
// and names the process; after the start, check-port -pid and wrk-requests (which would otherwise
// fail on a user's path with the other gateway's 401 or 404) see the port shared.
func TestLeftoverGatewayOnPort(t *testing.T) {
	caddy := buildCmd(t, "caddy")
	addr := func() string {
		a, err := proc.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	listen, secret := addr(), strings.Repeat("s", 32)
	leftover := startBenchGateway(t, caddy, listen, addr(), secret)

	var errOut bytes.Buffer
	if code := cli(context.Background(), []string{"check-port", listen}, nil, &errOut); code != exitError {
		t.Fatalf("check-port %s with a gateway on it: exit %d, want %d: %s", listen, code, exitError, errOut.String())
	}
	_, port, _ := strings.Cut(listen, ":")
	for _, want := range []string{"already answers", "pid " + strconv.Itoa(leftover.Pid()), "ss -ltnp 'sport = :" + port + "'"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("check-port says %q, without %q", errOut.String(), want)
		}
	}

	second := startBenchGateway(t, caddy, listen, addr(), strings.Repeat("t", 32))
	errOut.Reset()
	if code := cli(context.Background(), []string{"check-port", "-pid", strconv.Itoa(second.Pid()), listen}, nil, &errOut); code != exitError ||
		!strings.Contains(errOut.String(), "pid "+strconv.Itoa(leftover.Pid())) {
		t.Errorf("check-port -pid with a second gateway on the port: exit %d: %s", code, errOut.String())
	}
	errOut.Reset()
	code := cli(context.Background(), []string{"wrk-requests", "-target", "http://" + listen, "-jwt-secret", secret, "-activities", "2",
		"-users", "50", "-out", filepath.Join(t.TempDir(), "buys.tsv")}, nil, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), proc.ErrPortShared.Error()) {
		t.Errorf("wrk-requests against two gateways on one port: exit %d: %s", code, errOut.String())
	}

	leftover.Stop(10 * time.Second)
	errOut.Reset()
	if code := cli(context.Background(), []string{"check-port", "-pid", strconv.Itoa(second.Pid()), listen}, nil, &errOut); code != exitOK {
		t.Errorf("check-port -pid with the gateway alone: exit %d: %s", code, errOut.String())
	}
}

func TestCheckPortUsage(t *testing.T) {
	for _, args := range [][]string{{}, {"localhost:80"}, {"-pid", "-1", "127.0.0.1:1"}} {
		var errOut bytes.Buffer
		if code := cli(context.Background(), append([]string{"check-port"}, args...), nil, &errOut); code != exitUsage {
			t.Errorf("check-port %q: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// Package testsrv starts private server instances for tests: a redis-server (and a PostgreSQL
// cluster) on a free loopback port in a temporary folder, stopped when the test ends. Tests never
// touch a server someone else started.
package testsrv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// Redis is a private redis-server.
type Redis struct {
	t    testing.TB
	Addr string // host:port
	Dir  string // working directory (AOF, log)
	args []string
	proc *proc.Proc // nil when stopped
}

// RedisOption adjusts the server's command line.
type RedisOption func(*[]string)

// WithAOF turns on the append-only file with the given fsync policy ("always", "everysec").
func WithAOF(fsync string) RedisOption {
	return func(a *[]string) { *a = append(*a, "--appendonly", "yes", "--appendfsync", fsync) }
}

// WithArgs appends raw redis-server arguments.
func WithArgs(args ...string) RedisOption {
	return func(a *[]string) { *a = append(*a, args...) }
}

// RedisServerPath returns the redis-server binary or an error that says how to install it.
func RedisServerPath() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("redis-server not found: install it (Debian: apt-get install redis-server) or run 'make test', which does")
}

// StartRedis starts a private redis-server and registers its shutdown with t.Cleanup.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	extra := redisArgs(opts)
	return startRedis(t, t.TempDir(), func(int) (first, last []string, err error) { return nil, extra, nil })
}

// redisArgs is the command line opts make.
func redisArgs(opts []RedisOption) []string {
	var args []string
	for _, o := range opts {
		o(&args)
	}
	return args
}

// startRedis starts a redis-server in dir on a free port. args returns, for the port chosen, the
// arguments put before the common ones (a config file must come first) and after them.
func startRedis(t testing.TB, dir string, args func(port int) (first, last []string, err error)) *Redis {
	t.Helper()
	bin, err := RedisServerPath()
	if err != nil {
		t.Fatal(err)
	}
	r := &Redis{t: t, Dir: dir}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		first, last, err := args(port)
		if err != nil {
			t.Fatal(err)
		}
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		r.args = append(append([]string{bin}, first...),
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", r.Dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no",
			"--logfile", filepath.Join(r.Dir, "redis.log"), "--protected-mode", "no")
		r.args = append(r.args, last...)
		if lastErr = r.start(); lastErr == nil {
			t.Cleanup(r.Stop)
			return r
		}
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func (r *Redis) start() error {
	cmd := exec.Command(r.args[0], r.args[1:]...)
	cmd.Dir = r.Dir
	p, err := proc.StartReady(cmd, 10*time.Second, 20*time.Millisecond, func() error { return pingRedis(r.Addr) })
	if err != nil {
		return fmt.Errorf("redis-server on %s: %w:\n%s", r.Addr, err, r.logTail())
	}
	r.proc = p
	return nil
}

func (r *Redis) logTail() string { return proc.Tail(filepath.Join(r.Dir, "redis.log"), 5) }

// Kill stops the server with SIGKILL, as a crash would, and waits for it to exit.
func (r *Redis) Kill() {
	r.proc.Kill()
	r.proc = nil
}

// Stop shuts the server down (SIGTERM, a paused one too) and waits, killing it after 10 s; it
// is safe to call twice.
func (r *Redis) Stop() {
	r.proc.Stop(10 * time.Second)
	r.proc = nil
}

// Pause stops the server process (SIGSTOP) without closing its sockets; Resume continues it. It
// returns once the kernel shows the process stopped (proc.Proc.Pause).
func (r *Redis) Pause() {
	if r.proc != nil {
		r.proc.Pause()
	}
}

// Resume continues a paused server.
func (r *Redis) Resume() {
	if r.proc != nil {
		r.proc.Resume()
	}
}

// Restart starts the server again on the same address and directory after Kill or Stop.
func (r *Redis) Restart() {
	r.t.Helper()
	if err := restart(r.start); err != nil {
		r.t.Fatalf("restart redis-server on %s: %v", r.Addr, err)
	}
}

// restart calls start until it succeeds, up to 50 times 100 ms apart: the port of a server that
// was killed or stopped may linger briefly.
func restart(start func() error) error {
	var err error
	for attempt := 0; attempt < 50; attempt++ {
		if err = start(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// FreePort returns a loopback TCP port that was free a moment ago (proc.FreePort).
func FreePort() (int, error) { return proc.FreePort() }

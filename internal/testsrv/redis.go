// Package testsrv starts private server instances for tests: a redis-server (and a PostgreSQL
// cluster) on a free loopback port in a temporary folder, stopped when the test ends. Tests never
// touch a server someone else started.
package testsrv

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Redis is a private redis-server.
type Redis struct {
	t    testing.TB
	Addr string // host:port
	Dir  string // working directory (AOF, log)
	args []string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
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
	var extra []string
	for _, o := range opts {
		o(&extra)
	}
	return startRedis(t, t.TempDir(), func(int) (first, last []string, err error) { return nil, extra, nil })
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
	// Pdeathsig: a test binary that dies must not leave its private server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redis-server exited at start: %w: %s", exitErr, r.logTail())
		default:
		}
		if pingRedis(r.Addr) == nil {
			r.cmd, r.done = cmd, done
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("redis-server did not answer PING on %s: %s", r.Addr, r.logTail())
}

func (r *Redis) logTail() string {
	b, _ := os.ReadFile(filepath.Join(r.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// Kill stops the server with SIGKILL, as a crash would, and waits for it to exit.
func (r *Redis) Kill() { r.signal(syscall.SIGKILL) }

// Stop shuts the server down (SIGTERM) and waits; it is safe to call twice.
func (r *Redis) Stop() { r.signal(syscall.SIGTERM) }

func (r *Redis) signal(sig syscall.Signal) {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(sig)
	if sig == syscall.SIGTERM {
		_ = r.cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot handle SIGTERM
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	r.cmd = nil
}

// Pause stops the server process (SIGSTOP) without closing its sockets; Resume continues it. It
// returns once the kernel shows the process stopped: a signal is delivered asynchronously, and a
// server still running for a moment after kill(2) may answer a command the caller sends next.
func (r *Redis) Pause() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGSTOP)
	waitStopped(r.cmd.Process.Pid, 5*time.Second)
}

// waitStopped waits, up to limit, until /proc shows process pid stopped (state T).
func waitStopped(pid int, limit time.Duration) {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return // not Linux, or gone
		}
		// pid (comm) state ...: the command name may hold spaces and parentheses.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
	}
}

// Resume continues a paused server.
func (r *Redis) Resume() {
	if r.cmd != nil {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart starts the server again on the same address and directory after Kill or Stop.
func (r *Redis) Restart() {
	r.t.Helper()
	var err error
	for attempt := 0; attempt < 50; attempt++ { // the port may linger briefly after a kill
		if err = r.start(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.t.Fatalf("restart redis-server on %s: %v", r.Addr, err)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// pingRedis sends an inline PING and expects +PONG, without a client library.
func pingRedis(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected PING reply %q", line)
	}
	return nil
}

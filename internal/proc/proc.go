// Package proc starts and controls child processes: the private servers of tests
// (internal/testsrv), the gateways and order backends of the chaos scenarios, and the bench's
// children (cmd/seckill-bench). It starts a process in its own process group with a parent-death
// signal, waits for it to be ready, stops it (a signal, then SIGKILL after a grace period),
// pauses and continues it, and reads its state from /proc. Linux only, as the project's tests
// and bench are.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// ErrExited is returned by WaitReady when the process exits before it is ready.
var ErrExited = errors.New("process exited")

// Proc is a started child process. One goroutine waits for it, so Done, Exited and Err can be
// used from anywhere; the methods are safe for concurrent use.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, set before done is closed
}

// Start starts cmd. The child gets its own process group, so that a Ctrl-C at the terminal
// reaches the parent only (which then stops its children in order), and a parent-death signal,
// so that a test binary or bench that dies leaves no server behind: SIGKILL unless
// cmd.SysProcAttr already names one. Other SysProcAttr fields (a Credential) are kept.
func Start(cmd *exec.Cmd) (*Proc, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if cmd.SysProcAttr.Pdeathsig == 0 {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// StartReady starts cmd (as Start does) and waits until ready answers nil (as WaitReady does,
// without a context); a process that is not ready in time is killed.
func StartReady(cmd *exec.Cmd, timeout, interval time.Duration, ready func() error) (*Proc, error) {
	p, err := Start(cmd)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(context.Background(), timeout, interval, ready); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error (nil for a clean exit, *exec.ExitError otherwise) once it
// has exited, and nil before.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Kill sends SIGKILL, as a crash would, and waits until the process is gone. A nil Proc (a
// server that is not running) does nothing.
func (p *Proc) Kill() {
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop is StopWith(syscall.SIGTERM, grace).
func (p *Proc) Stop(grace time.Duration) bool { return p.StopWith(syscall.SIGTERM, grace) }

// StopWith asks the process to exit with sig (SIGINT for PostgreSQL's fast shutdown), waits up
// to grace, and then kills it. It reports whether the process exited within grace. SIGCONT
// follows sig, since a paused process cannot act on it. Safe on an exited process; a nil Proc
// does nothing.
func (p *Proc) StopWith(sig syscall.Signal, grace time.Duration) bool {
	if p == nil || p.Exited() {
		return true
	}
	_ = p.cmd.Process.Signal(sig)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		p.Kill()
		return false
	}
}

// Pause stops the process (SIGSTOP) without closing its sockets, and returns once the kernel
// shows it stopped (at most 5 s): a signal is delivered asynchronously, and a process still
// running a moment after kill(2) may answer what the caller sends next.
func (p *Proc) Pause() {
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	WaitStopped(p.Pid(), 5*time.Second)
}

// Resume continues a paused process (SIGCONT).
func (p *Proc) Resume() { _ = p.cmd.Process.Signal(syscall.SIGCONT) }

// WaitReady calls ready every interval until it returns nil, the process exits (an error
// wrapping ErrExited and the exit error), ctx is done or timeout passes (an error with ready's
// last answer). It does not stop the process on failure: the caller decides.
func (p *Proc) WaitReady(ctx context.Context, timeout, interval time.Duration, ready func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		// Exit first: a process that died must not be reported as merely slow.
		if p.Exited() {
			return p.exitedEarly()
		}
		last := ready()
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exitedEarly()
		case <-ctx.Done():
			return fmt.Errorf("not ready within %s: %w", timeout, last)
		case <-t.C:
		}
	}
}

// exitedEarly is WaitReady's error for a process that exited; p.done must be closed.
func (p *Proc) exitedEarly() error {
	if p.err == nil {
		return fmt.Errorf("%w before it was ready (exit status 0)", ErrExited)
	}
	return fmt.Errorf("%w before it was ready: %w", ErrExited, p.err)
}

// Dial is a ready check: addr accepts a TCP connection. A connection to itself does not count: a
// free port is in the ephemeral range, so a dial to it while nothing listens yet can be given that
// very port as its own and connect to itself (TCP simultaneous open), which both passes for
// readiness and takes the port from the server about to bind it.
func Dial(addr string) func() error {
	return func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		self := c.LocalAddr().String() == c.RemoteAddr().String()
		if err := c.Close(); err != nil {
			return err
		}
		if self {
			return fmt.Errorf("dial %s: connected to itself, nothing listens", addr)
		}
		return nil
	}
}

// HTTPStatus is a ready check: a GET of url answers status want.
func HTTPStatus(url string, want int) func() error {
	hc := &http.Client{Timeout: time.Second}
	return func() error {
		res, err := hc.Get(url)
		if err != nil {
			return err
		}
		_ = res.Body.Close()
		if res.StatusCode != want {
			return fmt.Errorf("GET %s: %s, want %d", url, res.Status, want)
		}
		return nil
	}
}

// Stopped reports whether /proc shows process pid stopped (state T or t, after a SIGSTOP).
func Stopped(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the command name may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'T' || b[i+2] == 't')
}

// WaitStopped waits, up to limit, until process pid is stopped, and reports whether it is. It
// returns false at once where /proc cannot tell (not Linux, or the process is gone).
func WaitStopped(pid int, limit time.Duration) bool {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for deadline := time.Now().Add(limit); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err != nil {
			return false
		}
		if Stopped(pid) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// FreePort returns a loopback TCP port that was free a moment ago. Another process may take it
// before the caller's child binds it, so callers retry a start that fails.
func FreePort() (int, error) {
	a, err := freeAddr()
	if err != nil {
		return 0, err
	}
	return a.Port, nil
}

// FreeAddr is FreePort as an address, 127.0.0.1:port.
func FreeAddr() (string, error) {
	a, err := freeAddr()
	if err != nil {
		return "", err
	}
	return a.String(), nil
}

func freeAddr() (*net.TCPAddr, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr), nil
}

// Tail returns the last lines of the file at path (a child's log), for error messages; the read
// error's text if it cannot be read.
func Tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

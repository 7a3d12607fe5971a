package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// child is a process the bench started (the gateway, redis-server, the order backend). Its output
// goes to a log file in the bench's work directory, which the bench names when something fails.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // the wait error, once done is closed
}

// startChild runs bin with args in dir, with env added to a minimal environment.
func startChild(name, dir, bin string, args []string, env []string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = f, f
	// HOME and XDG dirs point into the work directory so that the child writes nothing (Caddy's
	// autosave, certificates) into the user's home.
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "data"),
	}, env...)
	// Its own process group: a Ctrl-C at the terminal reaches the bench only, which then stops
	// its children in order and still reports. Pdeathsig: a bench that dies leaves no orphans.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		_ = f.Close()
		close(c.done)
	}()
	return c, nil
}

// pid returns the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the child has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop asks the child to exit (SIGTERM), and kills it after grace.
func (c *child) stop(grace time.Duration) error {
	if c.exited() {
		return c.exitErr()
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%s did not stop within %s and was killed (log: %s)", c.name, grace, c.log)
	}
	return nil
}

func (c *child) exitErr() error {
	if c.err == nil {
		return fmt.Errorf("%s exited (log: %s)", c.name, c.log)
	}
	return fmt.Errorf("%s exited: %w (log: %s)", c.name, c.err, c.log)
}

// tail returns the end of the child's log, for error messages.
func (c *child) tail() string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

// waitHTTP polls url until it answers want, the child exits, or timeout passes.
func (c *child) waitHTTP(ctx context.Context, url string, want int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cl := &http.Client{Timeout: time.Second}
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := cl.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == want {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case <-c.done:
			return fmt.Errorf("%s: %w\n%s", c.name, c.exitErr(), c.tail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s after %s (last: %s); log %s:\n%s", c.name, url, timeout, last, c.log, c.tail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitTCP waits until addr accepts connections.
func (c *child) waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = conn.Close()
			return nil
		}
		if c.exited() {
			return fmt.Errorf("%s: %w\n%s", c.name, c.exitErr(), c.tail())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("%s not listening on %s after %s (log %s)", c.name, addr, timeout, c.log), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freePort returns a loopback address with a port nobody listens on right now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr, nil
}

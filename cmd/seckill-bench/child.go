package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// child is a process the bench started (the gateway, redis-server, the order backend). Its output
// goes to a log file in the bench's work directory, which the bench names when something fails.
type child struct {
	name string
	log  string
	proc *proc.Proc
}

// startChild runs bin with args in dir, with env added to a minimal environment.
func startChild(name, dir, bin string, args []string, env []string) (*child, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer func() { _ = f.Close() }() // the child holds its own descriptor
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
	// proc.Start puts the child in its own process group: a Ctrl-C at the terminal reaches the
	// bench only, which then stops its children in order and still reports. A bench that dies
	// asks its children to stop (SIGTERM) rather than killing them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	p, err := proc.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &child{name: name, log: logPath, proc: p}, nil
}

// pid returns the child's process id.
func (c *child) pid() int { return c.proc.Pid() }

// stop asks the child to exit (SIGTERM), and kills it after grace.
func (c *child) stop(grace time.Duration) error {
	if c.proc.Exited() {
		return c.exitErr()
	}
	if !c.proc.Stop(grace) {
		return fmt.Errorf("%s did not stop within %s and was killed (log: %s)", c.name, grace, c.log)
	}
	return nil
}

func (c *child) exitErr() error {
	if err := c.proc.Err(); err != nil {
		return fmt.Errorf("%s exited: %w (log: %s)", c.name, err, c.log)
	}
	return fmt.Errorf("%s exited (log: %s)", c.name, c.log)
}

// wait waits until ready answers nil, the child exits or timeout passes, and says which in its
// error, with the end of the child's log.
func (c *child) wait(ctx context.Context, what string, timeout time.Duration, ready func() error) error {
	err := c.proc.WaitReady(ctx, timeout, 50*time.Millisecond, ready)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proc.ErrExited):
		return fmt.Errorf("%s: %w\n%s", c.name, c.exitErr(), proc.Tail(c.log, 40))
	default:
		return fmt.Errorf("%s not %s: %w; log %s:\n%s", c.name, what, err, c.log, proc.Tail(c.log, 40))
	}
}

// waitHTTP polls url until it answers want, the child exits, or timeout passes.
func (c *child) waitHTTP(ctx context.Context, url string, want int, timeout time.Duration) error {
	return c.wait(ctx, "ready at "+url, timeout, proc.HTTPStatus(url, want))
}

// waitTCP waits until addr accepts connections.
func (c *child) waitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	return c.wait(ctx, "listening on "+addr, timeout, proc.Dial(addr))
}

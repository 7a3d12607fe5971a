package proc

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv makes the test binary a child instead of running the tests: "listen" listens on
// the port in helperPortEnv until it is signalled, "deaf" does the same ignoring SIGTERM,
// "reuseport" does it with SO_REUSEPORT as Caddy does, and "fail" exits with status 3 at once.
const (
	helperEnv     = "PROC_TEST_HELPER"
	helperPortEnv = "PROC_TEST_PORT"
)

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "fail":
		os.Exit(3)
	case "deaf":
		signal.Ignore(syscall.SIGTERM)
	}
	lc := net.ListenConfig{}
	if os.Getenv(helperEnv) == "reuseport" {
		lc.Control = reusePort
	}
	l, err := lc.Listen(context.Background(), "tcp", net.JoinHostPort("127.0.0.1", os.Getenv(helperPortEnv)))
	if err != nil {
		os.Exit(4)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(5)
		}
		_ = c.Close()
	}
}

// startHelper starts the test binary as a child in mode, listening on a free port, and returns
// it with its address.
func startHelper(t *testing.T, mode string) (*Proc, string) {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperPortEnv+"="+strconv.Itoa(port))
	p, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func TestStartReadyStop(t *testing.T) {
	p, addr := startHelper(t, "listen")
	if attr := p.cmd.SysProcAttr; !attr.Setpgid || attr.Pdeathsig != syscall.SIGKILL {
		t.Fatalf("SysProcAttr %+v: want its own group and SIGKILL at the parent's death", attr)
	}
	if err := p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, Dial(addr)); err != nil {
		t.Fatal(err)
	}
	if p.Exited() || p.Err() != nil {
		t.Fatalf("exited %v, err %v while listening", p.Exited(), p.Err())
	}
	if !p.Stop(time.Minute) {
		t.Fatal("SIGTERM did not end the child within a minute")
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("exit error %v, want death by SIGTERM", p.Err())
	}
	if !p.Stop(time.Second) {
		t.Fatal("Stop of an exited process must report it exited")
	}
}

func TestStopKillsAfterGrace(t *testing.T) {
	p, addr := startHelper(t, "deaf")
	if err := p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, Dial(addr)); err != nil {
		t.Fatal(err)
	}
	if p.Stop(200 * time.Millisecond) {
		t.Fatal("a child ignoring SIGTERM was reported as exiting on it")
	}
	if !p.Exited() {
		t.Fatal("Stop returned with the child still running")
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit error %v, want death by SIGKILL", p.Err())
	}
}

func TestWaitReadyExited(t *testing.T) {
	p, addr := startHelper(t, "fail")
	err := p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, Dial(addr))
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("WaitReady on a child that exits: %v, want ErrExited with its status", err)
	}
}

func TestWaitReadyTimeout(t *testing.T) {
	p, _ := startHelper(t, "listen")
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitReady(context.Background(), 100*time.Millisecond, 10*time.Millisecond,
		Dial(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))))
	if err == nil || errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "not ready within") {
		t.Fatalf("WaitReady on a port nobody listens on: %v, want a timeout", err)
	}
}

func TestPauseResume(t *testing.T) {
	p, addr := startHelper(t, "listen")
	if err := p.WaitReady(context.Background(), time.Minute, 10*time.Millisecond, Dial(addr)); err != nil {
		t.Fatal(err)
	}
	p.Pause()
	if !Stopped(p.Pid()) {
		t.Fatal("Pause returned with the child not stopped")
	}
	p.Resume()
	deadline := time.Now().Add(time.Minute)
	for Stopped(p.Pid()) {
		if time.Now().After(deadline) {
			t.Fatal("still stopped a minute after Resume")
		}
		time.Sleep(time.Millisecond)
	}
	p.Pause()
	// A paused child still ends on Stop: SIGCONT follows the signal.
	if !p.Stop(time.Minute) {
		t.Fatal("a paused child did not end on SIGTERM")
	}
}

func TestWaitStoppedGone(t *testing.T) {
	p, _ := startHelper(t, "fail")
	<-p.Done()
	if WaitStopped(p.Pid(), time.Minute) {
		t.Fatal("a process that is gone reported stopped")
	}
}

func TestStartReady(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=listen", helperPortEnv+"="+strconv.Itoa(port))
	p, err := StartReady(cmd, time.Minute, 10*time.Millisecond, Dial(addr))
	if err != nil {
		t.Fatal(err)
	}
	if err := Dial(addr)(); err != nil {
		t.Fatalf("StartReady returned before %s listened: %v", addr, err)
	}
	if !p.Stop(time.Minute) {
		t.Fatal("SIGTERM did not end the child")
	}
	var none *Proc
	none.Kill()
	if !none.Stop(time.Second) {
		t.Fatal("a nil Proc must stop as a process that is gone")
	}

	// Not ready in time: killed, not left running.
	cmd = exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=listen", helperPortEnv+"="+strconv.Itoa(port))
	never := func() error { return errors.New("never ready") }
	if p, err := StartReady(cmd, 200*time.Millisecond, 10*time.Millisecond, never); err == nil || p != nil {
		t.Fatalf("StartReady with a check that never passes: %v, %v", p, err)
	}
	if cmd.ProcessState == nil {
		t.Fatal("the child not ready in time was not waited for")
	}
}

func TestFreeAddr(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("FreeAddr %s cannot be listened on: %v", addr, err)
	}
	_ = l.Close()
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := Tail(path, 2); got != "c\nd" {
		t.Fatalf("Tail 2 = %q, want %q", got, "c\nd")
	}
	if got := Tail(path, 10); got != "a\nb\nc\nd" {
		t.Fatalf("Tail 10 = %q", got)
	}
}

func TestHTTPStatusRefused(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if err := HTTPStatus("http://127.0.0.1:"+strconv.Itoa(port)+"/", 200)(); err == nil {
		t.Fatal("HTTPStatus on a port nobody listens on reported ready")
	}
}

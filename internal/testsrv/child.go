package testsrv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// StartChild re-executes the test binary to run only the test entry (a test that acts as a child
// process when it finds its variables in env), and returns it with its stdout lines, which arrive
// on the channel until the child ends, so that a test can SIGKILL the code under test. The child is killed when the test ends.
func StartChild(t testing.TB, entry string, env ...string) (*proc.Proc, <-chan string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+entry+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	// A pipe of our own, not StdoutPipe: proc waits for the child at once, and Wait would close a
	// StdoutPipe before its last lines are read.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = w
	p, err := proc.Start(cmd)
	_ = w.Close() // the child holds its own descriptor
	if err != nil {
		_ = r.Close()
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		defer func() { _ = r.Close() }()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, r)
	}()
	return p, lines
}

// KillChild SIGKILLs the child and waits for it; a child that exited before fails the test.
func KillChild(t testing.TB, p *proc.Proc) {
	t.Helper()
	if p.Exited() {
		t.Fatalf("the child exited before the kill: %v", p.Err())
	}
	p.Kill()
}

// WaitLine returns the first line of a child starting with prefix, failing the test on an error
// line (it starts "E ") or after a minute.
func WaitLine(t testing.TB, lines <-chan string, prefix string, collect *[]string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child ended before %q", prefix)
			}
			if collect != nil {
				*collect = append(*collect, l)
			}
			if strings.HasPrefix(l, "E ") {
				t.Fatalf("child: %s", l)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q from the child within 60 s", prefix)
		}
	}
}

package testcaddy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// builtCaddy is cmd/caddy built once for the tests that need a second process or the command line.
var builtCaddy struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// Main runs the tests of a package (call it from TestMain) and then removes the binary BuildCaddy
// built, if any.
func Main(m *testing.M) {
	code := m.Run()
	if builtCaddy.dir != "" {
		_ = os.RemoveAll(builtCaddy.dir)
	}
	os.Exit(code)
}

// BuildCaddy builds cmd/caddy (once per test binary, whose TestMain calls Main) and returns the
// binary. It skips the test with -short.
func BuildCaddy(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds cmd/caddy")
	}
	b := &builtCaddy
	b.once.Do(func() {
		gobin, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("no go command to build cmd/caddy: %w", err)
			return
		}
		if b.dir, b.err = os.MkdirTemp("", "seckill-caddy-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, "caddy")
		// By import path: the test runs in its package's folder, somewhere in the module.
		cmd := exec.Command(gobin, "build", "-o", b.bin, "github.com/caddy-seckill/caddy-seckill/cmd/caddy")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/caddy: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

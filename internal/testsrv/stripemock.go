package testsrv

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// StripeMockModule is the version of Stripe's own API mock the tests run.
const StripeMockModule = "github.com/stripe/stripe-mock@v0.203.0"

// StripeMock is a private stripe-mock: Stripe's OpenAPI-driven mock, which validates every request
// against Stripe's specification and answers from fixtures. It is stateless: it keeps nothing
// between requests, so idempotency and search answers come from its fixtures.
type StripeMock struct {
	URL  string // http://127.0.0.1:port, the API base
	Dir  string
	proc *proc.Proc
}

// StripeMockOption changes the fixtures stripe-mock answers with.
type StripeMockOption func(resources map[string]map[string]any)

// WithStripeFixture sets fields of a resource's fixture (for instance "payment_intent" with
// {"status": "succeeded"}): the answer to every request that returns that resource, lists and
// searches included.
func WithStripeFixture(resource string, fields map[string]any) StripeMockOption {
	return func(res map[string]map[string]any) {
		if res[resource] == nil {
			res[resource] = map[string]any{}
		}
		for k, v := range fields {
			res[resource][k] = v
		}
	}
}

// goTool returns the go command, which installs stripe-mock and finds its fixtures.
func goTool() (string, error) {
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("stripe-mock: the go command is not in PATH (it installs %s): %w", StripeMockModule, err)
	}
	return p, nil
}

// StripeMockPath returns the stripe-mock binary, installing StripeMockModule with go install into
// the user's cache folder (caddy-seckill/bin) when it is not there yet.
func StripeMockPath() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("stripe-mock: %w", err)
	}
	bin := filepath.Join(cache, "caddy-seckill", "bin")
	path := filepath.Join(bin, "stripe-mock")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goBin, "install", StripeMockModule)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod")
	cmd.Dir = os.TempDir() // outside any module
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install stripe-mock (go install %s): %w:\n%s", StripeMockModule, err, out)
	}
	return path, nil
}

// stripeFixtures writes stripe-mock's bundled fixtures, changed by opts, into dir.
func stripeFixtures(dir string, opts []StripeMockOption) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goBin, "mod", "download", "-json", StripeMockModule)
	cmd.Dir = os.TempDir()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("stripe-mock fixtures (go mod download %s): %w", StripeMockModule, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", fmt.Errorf("stripe-mock fixtures: %w", err)
	}
	raw, err := os.ReadFile(filepath.Join(mod.Dir, "embedded", "openapi", "fixtures3.json"))
	if err != nil {
		return "", fmt.Errorf("stripe-mock fixtures: %w", err)
	}
	var fx struct {
		Resources map[string]map[string]any `json:"resources"`
	}
	if err := json.Unmarshal(raw, &fx); err != nil {
		return "", fmt.Errorf("stripe-mock fixtures: %w", err)
	}
	for _, o := range opts {
		o(fx.Resources)
	}
	b, err := json.Marshal(fx)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "fixtures.json")
	return path, os.WriteFile(path, b, 0o600)
}

// StartStripeMock starts a private stripe-mock on free loopback ports (its HTTPS listener too, so
// it never takes the default port), with its bundled fixtures changed by opts; it is stopped when
// the test ends.
func StartStripeMock(t testing.TB, opts ...StripeMockOption) *StripeMock {
	t.Helper()
	bin, err := StripeMockPath()
	if err != nil {
		t.Fatal(err)
	}
	s := &StripeMock{Dir: t.TempDir()}
	args := []string{}
	if len(opts) > 0 {
		fx, err := stripeFixtures(s.Dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "-fixtures", fx)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		httpAddr, err1 := proc.FreeAddr()
		httpsAddr, err2 := proc.FreeAddr()
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		s.URL = "http://" + httpAddr
		if lastErr = s.start(bin, append(args, "-http-addr", httpAddr, "-https-addr", httpsAddr)); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("start stripe-mock: %v", lastErr)
	return nil
}

func (s *StripeMock) start(bin string, args []string) error {
	logPath := filepath.Join(s.Dir, "stripe-mock.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = logf.Close() }() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = logf, logf
	host := s.URL[len("http://"):]
	p, err := proc.StartReady(cmd, 30*time.Second, 20*time.Millisecond, proc.Dial(host))
	if err != nil {
		return fmt.Errorf("stripe-mock on %s: %w:\n%s", host, err, proc.Tail(logPath, 5))
	}
	s.proc = p
	return nil
}

// Stop shuts the mock down and waits, killing it after 10 s; it is safe to call twice.
func (s *StripeMock) Stop() {
	if s.proc != nil {
		s.proc.Stop(10 * time.Second)
		s.proc = nil
	}
}

package seckillcmd_test

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/caddy-seckill/caddy-seckill/internal/testcaddy"
)

// TestTokenFromConfig mints tokens with `caddy seckill token --config` from a Caddyfile whose jwt
// block takes its secret from the environment and sets an issuer, an audience, a user claim and
// a public-key algorithm before the HMAC one, and buys with them from a Caddy loaded from that
// same Caddyfile.
func TestTokenFromConfig(t *testing.T) {
	bin := testcaddy.BuildCaddy(t)
	const secretVar = "SECKILL_TEST_TOKEN_SECRET"
	secret := "token-test-secret-0123456789abcdef0123456789abcdef" // 50 bytes: enough for HS384
	t.Setenv(secretVar, secret)

	port := testcaddy.FreePort(t)
	now := time.Now()
	jwtConf := fmt.Sprintf("jwt {\n\talgorithms ES256 HS384\n\tpublic_key_file %s\n\thmac_secret {env.%s}\n"+
		"\tissuer shop\n\taudience seckill\n\tuser_claim uid\n}\n", testcaddy.ECKeyFile(t), secretVar)
	content := testcaddy.Caddyfile(t, port, jwtConf+"captcha off\n"+
		testcaddy.ActivityBlock("tk", 3, 1, now.Add(-time.Minute), now.Add(time.Hour), 0), testcaddy.Route)
	dir := t.TempDir()
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	mint := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"seckill", "token"}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return stderr.String(), err
		}
		return strings.TrimSpace(string(out)), nil
	}

	tok, err := mint("--config", file, "--user", "alice", "--ttl", "10m")
	if err != nil {
		t.Fatalf("seckill token --config: %v: %s", err, tok)
	}
	parsed, _, err := jwt.NewParser().ParseUnverified(tok, jwt.MapClaims{})
	if err != nil {
		t.Fatal(err)
	}
	claims := parsed.Claims.(jwt.MapClaims)
	if parsed.Method.Alg() != "HS384" || claims["iss"] != "shop" || claims["uid"] != "alice" || claims["sub"] != "alice" {
		t.Errorf("minted token: alg %s, claims %v", parsed.Method.Alg(), claims)
	}

	testcaddy.RunCaddyfile(t, content)
	cfg, err := testcaddy.Adapt(t, content) // the same configuration as JSON, for --config below
	if err != nil {
		t.Fatal(err)
	}
	c := testcaddy.NewClient(t, fmt.Sprintf("http://127.0.0.1:%d", port))
	testcaddy.Expect(t, "result with the minted token", c.Get("/seckill/tk/result", tok), http.StatusOK, "none")
	b := c.Post(testcaddy.BuyPath(t, c, "tk", tok), tok, "")
	testcaddy.Expect(t, "buy with the minted token", b, http.StatusAccepted, "queued")
	r := c.Get("/seckill/tk/result", tok)
	testcaddy.Expect(t, "result after the buy", r, http.StatusOK, "queued")
	if r.Str("reservation_id") != b.Str("reservation_id") {
		t.Errorf("result %s does not name the reservation of %s", r, b)
	}

	// The same secret without the configuration's issuer and audience is refused: --config is what
	// makes the token fit.
	plain, err := mint("--secret", secret, "--alg", "HS384", "--user", "alice")
	if err != nil {
		t.Fatalf("seckill token --secret: %v: %s", err, plain)
	}
	testcaddy.Expect(t, "result with a --secret token", c.Get("/seckill/tk/result", plain), http.StatusUnauthorized, "unauthorized")
	// An explicit flag overrides the configuration.
	other, err := mint("--config", file, "--user", "bob", "--audience", "elsewhere")
	if err != nil {
		t.Fatalf("seckill token --config --audience: %v: %s", err, other)
	}
	testcaddy.Expect(t, "result with another audience", c.Get("/seckill/tk/result", other), http.StatusUnauthorized, "unauthorized")

	// The JSON form of the configuration, and a Caddyfile under another name with --adapter.
	jsonFile := filepath.Join(dir, "caddy.json")
	confFile := filepath.Join(dir, "sale.conf")
	if err := os.WriteFile(jsonFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(confFile, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--config", jsonFile}, {"--config", confFile, "--adapter", "caddyfile"}} {
		tok, err := mint(append(args, "--user", "carol")...)
		if err != nil {
			t.Fatalf("seckill token %v: %v: %s", args, err, tok)
		}
		testcaddy.Expect(t, fmt.Sprintf("result with a token from %v", args), c.Get("/seckill/tk/result", tok), http.StatusOK, "none")
	}

	// Mistakes are refused with a message.
	rsOnly := filepath.Join(dir, "rs.caddyfile")
	if err := os.WriteFile(rsOnly, []byte(testcaddy.Caddyfile(t, port, fmt.Sprintf("jwt {\n\talgorithms ES256\n\tpublic_key_file %s\n}\n", testcaddy.ECKeyFile(t)), testcaddy.Route)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"secret and config", []string{"--config", file, "--secret", secret}, nil, "--secret and --config are exclusive"},
		{"alg not configured", []string{"--config", file, "--alg", "HS256"}, nil, "--alg HS256: the configuration accepts [HS384]"},
		{"no hmac", []string{"--config", rsOnly}, nil, "minting needs an hmac_secret and an HS256, HS384 or HS512 algorithm"},
		{"unset variable", []string{"--config", file}, []string{secretVar + "="}, "is empty once placeholders are replaced: set the variable"},
		{"missing file", []string{"--config", filepath.Join(dir, "nope.json")}, nil, "nope.json"},
		{"adapter without config", []string{"--secret", secret, "--adapter", "caddyfile"}, nil, "--adapter needs --config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, append([]string{"seckill", "token", "--user", "alice"}, tc.args...)...)
			cmd.Env = append(os.Environ(), tc.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("minted a token; want an error containing %q: %s", tc.want, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output %q does not contain %q", out, tc.want)
			}
		})
	}
}

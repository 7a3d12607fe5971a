package caddymodule_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

// validate adapts the Caddyfile and checks it as `caddy validate` does (caddy.Validate).
func validate(t *testing.T, text string) error {
	t.Helper()
	js, err := adapt(t, text)
	if err != nil {
		t.Fatalf("adapt: %v", err)
	}
	var cfg caddy.Config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		t.Fatal(err)
	}
	return caddy.Validate(&cfg)
}

// TestValidateOpensNothing: `caddy validate` checks a configuration without opening its store or
// its order database. It passes while another process holds the store folder and with a Redis
// that does not answer, and it creates no folder and no database.
func TestValidateOpensNothing(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "held")
	held, err := localstore.Open(dir, localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Close() })
	port := freePort(t)
	act := activityBlock("a", 5, 1, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 0)
	fresh, db := filepath.Join(tmp, "fresh"), filepath.Join(tmp, "orders.db")
	for _, tc := range []struct{ name, seckill string }{
		{"store local held by another", jwtBlock + "url_secret u\nstore local " + dir + "\norders sqlite " + db + "\n" + act},
		{"store local not created yet", jwtBlock + "url_secret u\nstore local " + fresh + "\n" + act},
		{"store redis not answering", jwtBlock + fmt.Sprintf("url_secret u\nstore redis 127.0.0.1:%d\n", freePort(t)) + act},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validate(t, caddyfile(t, port, tc.seckill, route)); err != nil {
				t.Fatalf("validate: %v", err)
			}
		})
	}
	for _, f := range []string{fresh, db} {
		if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("validate created %s (stat: %v)", f, err)
		}
	}
	// What validate can check without the store, it still checks.
	if err := validate(t, caddyfile(t, port, jwtBlock+"url_secret {env.SECKILL_TEST_UNSET_VARIABLE}\n", route)); err == nil ||
		!strings.Contains(err.Error(), "is empty once placeholders are replaced") {
		t.Errorf("validate with an unset url_secret variable: %v", err)
	}
	if err := validate(t, caddyfile(t, port, jwtBlock+"rate_limit user 2/s distributed\n", route)); err == nil ||
		!strings.Contains(err.Error(), "rate_limit user distributed needs store redis") {
		t.Errorf("validate with a distributed limit on store memory: %v", err)
	}
}

// TestValidateJSON: the checks the Caddyfile makes at its lines, provisioning makes for a JSON
// configuration, with the same advice.
func TestValidateJSON(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ seckill, want string }{
		{`{"store": {"type": "redis", "addresses": ["127.0.0.1:1"]}}`, "url_secret is required with store redis"},
		{`{"jwt": {"algorithms": ["HS256"]}}`, "jwt: HS256 verifies tokens with an HMAC secret, and hmac_secret is not set: set it to 32 random bytes or more"},
		{`{"jwt": {"algorithms": ["HS512"], "hmac_secret": "short"}}`, "jwt: HS512 needs an hmac_secret of 64 bytes or more, and the one set has 5"},
		{`{"url_secret": "u", "store": {"type": "local", "dir": "` + file + `"}}`, "store local " + file + " is a file, not a folder"},
	} {
		var cfg caddy.Config
		if err := json.Unmarshal([]byte(`{"admin": {"disabled": true}, "apps": {"seckill": `+tc.seckill+`}}`), &cfg); err != nil {
			t.Fatal(err)
		}
		if err := caddy.Validate(&cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate %s: %v; want %q", tc.seckill, err, tc.want)
		}
	}
}

// TestValidateStoreFolderFile: a store folder that is a file is refused at provisioning, where a
// JSON configuration or a placeholder meets it (the Caddyfile refuses a literal one with its line).
func TestValidateStoreFolderFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SECKILL_TEST_DATA", file)
	err := validate(t, caddyfile(t, freePort(t), jwtBlock+"url_secret u\nstore local {env.SECKILL_TEST_DATA}\n", route))
	if err == nil || !strings.Contains(err.Error(), "store local "+file+" is a file, not a folder") {
		t.Errorf("validate on a store folder that is a file: %v", err)
	}
}

// TestValidateCommand runs `caddy validate` while another process holds the store folder: valid,
// and its log says which checks need the running store.
func TestValidateCommand(t *testing.T) {
	bin := buildCaddy(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "data")
	held, err := localstore.Open(dir, localstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Close() })
	act := activityBlock("a", 5, 1, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour), 0)
	file := filepath.Join(tmp, "Caddyfile")
	text := fmt.Sprintf("{\n\tadmin off\n\tseckill {\n%surl_secret u\nstore local %s\n%s\t}\n}\n:%d {\n%s}\n",
		jwtBlock, dir, act, freePort(t), route)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "validate", "--config", file, "--adapter", "caddyfile").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy validate while the folder is held: %v\n%s", err, out)
	}
	for _, want := range []string{
		"Valid configuration",
		"the store was not opened",
		"opening store local " + dir,
		"the activities against the sale in the store",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("caddy validate says no %q:\n%s", want, out)
		}
	}
}

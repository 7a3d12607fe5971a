package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// provisionApp provisions the seckill app of JSON config as Caddy does; Cleanup releases what it
// took from the pool when the test ends.
func provisionApp(t *testing.T, config string) (*App, error) {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	app := new(App)
	if err := json.Unmarshal([]byte(config), app); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = app.Cleanup() })
	return app, app.Provision(ctx)
}

// TestOrdersSyncFollowsFsync: the embedded SQLite order database flushes its commits to the device
// exactly when the store does (store local with fsync always).
func TestOrdersSyncFollowsFsync(t *testing.T) {
	for _, c := range []struct {
		store string
		want  bool
	}{
		{fmt.Sprintf(`{"type": "local", "dir": %q, "fsync": "always"}`, t.TempDir()), true},
		{fmt.Sprintf(`{"type": "local", "dir": %q}`, t.TempDir()), false},
		{`{"type": "memory"}`, false},
	} {
		app, err := provisionApp(t, fmt.Sprintf(`{"store": %s, "url_secret": "s", "disable_captcha": true,
			"orders": {"type": "sqlite", "dsn": %q}}`, c.store, filepath.Join(t.TempDir(), "o.db")))
		if err != nil {
			t.Fatal(err)
		}
		if err := app.open(); err != nil { // what Start does first
			t.Fatal(err)
		}
		if app.orders.syncFull != c.want {
			t.Errorf("store %s: orders syncFull %v, want %v", c.store, app.orders.syncFull, c.want)
		}
	}
}

// Reconcile on a store local folder that holds no store fails and creates nothing: a mistyped or
// relative folder must not become an empty sale that reconciles as "no activities".
func TestReconcileMissingLocalFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "no-such-data")
	app := &App{
		StoreRaw: json.RawMessage(fmt.Sprintf(`{"type": "local", "dir": %q}`, dir)),
		Orders:   &OrdersConfig{Type: ordersSQLite, DSN: filepath.Join(dir, "orders.db")},
	}
	_, err := app.ReconcileDirect(context.Background(), "")
	if err == nil || !strings.Contains(err.Error(), "no store in this folder") {
		t.Fatalf("reconcile on a missing folder = %v, want the no-store error", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("reconcile created %s (stat: %v)", dir, err)
	}
}

// TestStoreModules: the three stores are guest modules of seckill.stores that the app can use,
// and a JSON store configuration with another store's option is refused with the option's name.
func TestStoreModules(t *testing.T) {
	var names []string
	for _, info := range caddy.GetModules(storeNamespace) {
		if _, ok := info.New().(StoreModule); !ok {
			t.Errorf("%s is not a StoreModule", info.ID)
		}
		if !strings.HasPrefix(info.ID.Name(), "test") { // the tests' own (waitroom_store_test.go)
			names = append(names, string(info.ID))
		}
	}
	if got := strings.Join(names, " "); got != "seckill.stores.local seckill.stores.memory seckill.stores.redis" {
		t.Errorf("store modules %q", got)
	}
	for store, want := range map[string]string{
		`{"type": "memory", "addresses": ["a:1"]}`: `unknown field "addresses"`,
		`{"type": "redis", "dir": "d"}`:            `unknown field "dir"`,
		`{"type": "disk"}`:                         "seckill.stores.disk",
	} {
		if _, err := provisionApp(t, `{"store": `+store+`}`); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("store %s: %v, want %q", store, err, want)
		}
	}
}

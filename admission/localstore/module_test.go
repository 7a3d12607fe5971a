package localstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// provision provisions m in a context of its own, as Caddy does with a guest module.
func provision(t *testing.T, m *Module) error {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	return m.Provision(ctx)
}

// TestModuleValidate: JSON configurations of store local that the Caddyfile parser cannot produce
// are refused at provisioning with the directive's name.
func TestModuleValidate(t *testing.T) {
	for _, c := range []struct {
		m    Module
		want string
	}{
		{Module{}, "store local: the folder is required"},
		{Module{Dir: "  "}, "store local: the folder is required"},
		{Module{Dir: "{env.SECKILL_NO_SUCH_VARIABLE}"}, "is empty once placeholders are replaced"},
		{Module{Dir: "d", Fsync: "everysec"}, `store local: fsync "everysec": want always or no`},
	} {
		if err := provision(t, &c.m); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("provision %+v = %v, want %q", c.m, err, c.want)
		}
	}
	for _, ok := range []Module{{Dir: "d"}, {Dir: "d", Fsync: fsyncNo}, {Dir: "d", Fsync: fsyncAlways}} {
		if err := provision(t, &ok); err != nil {
			t.Errorf("provision %+v = %v", ok, err)
		}
	}
}

// TestModuleKeyThroughSymlink: a folder reached through a symlink gets the same pool key before
// it exists (the first start) and after (a reload), so a reload finds the store it opened.
func TestModuleKeyThroughSymlink(t *testing.T) {
	tmp := t.TempDir()
	real := filepath.Join(tmp, "real")
	if err := os.Mkdir(real, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(tmp, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	before := &Module{Dir: filepath.Join(link, "data")}
	if err := provision(t, before); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(real, "data"), 0o750); err != nil {
		t.Fatal(err)
	}
	after := &Module{Dir: filepath.Join(link, "data")}
	if err := provision(t, after); err != nil {
		t.Fatal(err)
	}
	if want := "local:" + filepath.Join(real, "data"); before.PoolKey() != want || after.PoolKey() != want {
		t.Errorf("key before the folder existed %q, after %q; want both %q", before.PoolKey(), after.PoolKey(), want)
	}
}

// TestModuleOpenExisting: reconcile's open of a folder without a store fails and creates nothing
// (a mistyped or relative folder must not become an empty sale that reconciles as "no
// activities"), and a folder another opening holds is admission.ErrInUse.
func TestModuleOpenExisting(t *testing.T) {
	missing := &Module{Dir: filepath.Join(t.TempDir(), "no-such-data")}
	if err := provision(t, missing); err != nil {
		t.Fatal(err)
	}
	if _, err := missing.OpenExisting(); err == nil || !strings.Contains(err.Error(), "no store in this folder") {
		t.Fatalf("open of a missing folder = %v, want the no-store error", err)
	}
	if _, err := os.Stat(missing.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the open created %s (stat: %v)", missing.Dir, err)
	}

	held := &Module{Dir: t.TempDir()}
	if err := provision(t, held); err != nil {
		t.Fatal(err)
	}
	st, err := held.OpenStore()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := held.OpenExisting(); !errors.Is(err, admission.ErrInUse) {
		t.Fatalf("open of a folder in use = %v, want ErrInUse", err)
	}
	if _, err := held.OpenStore(); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("second open of a folder in use = %v, want ErrLocked with advice", err)
	}
}

// TestModuleReuseKeepsFsync: a reload cannot change the flush policy of an open folder.
func TestModuleReuseKeepsFsync(t *testing.T) {
	dir := t.TempDir()
	first := &Module{Dir: dir}
	if err := provision(t, first); err != nil {
		t.Fatal(err)
	}
	st, err := first.OpenStore()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	same := &Module{Dir: dir, Fsync: fsyncNo}
	always := &Module{Dir: dir, Fsync: fsyncAlways}
	for _, m := range []*Module{same, always} {
		if err := provision(t, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := same.Reuse(st); err != nil {
		t.Errorf("reuse with the same policy: %v", err)
	}
	if err := always.Reuse(st); err == nil || !strings.Contains(err.Error(), "has fsync no: a reload cannot change it") {
		t.Errorf("reuse with fsync always = %v, want the refusal", err)
	}
}

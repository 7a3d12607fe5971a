package localstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

func init() {
	caddy.RegisterModule(MemoryModule{})
	caddy.RegisterModule(Module{})
}

// MemoryModule is the Caddy guest module seckill.stores.memory, the default store: one node, in
// this process, not durable. It takes no options.
type MemoryModule struct{}

// CaddyModule returns the Caddy module information.
func (MemoryModule) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "seckill.stores.memory",
		New: func() caddy.Module { return new(MemoryModule) },
	}
}

// PoolKey identifies the store: every configuration of store memory shares the one sale of this
// process.
func (*MemoryModule) PoolKey() string { return "memory" }

// OpenStore returns a new memory store.
func (*MemoryModule) OpenStore() (admission.Store, error) { return NewMemory(MemoryOptions{}), nil }

// KeepsLine reports that the store keeps a waiting room's line: this process's, lost with it.
func (*MemoryModule) KeepsLine() bool { return true }

// ForgottenSaleAdvice is what to do when the order database holds orders of a sale this store
// does not know.
func (*MemoryModule) ForgottenSaleAdvice() string {
	return "store memory is not durable: a restart forgets the sale. Use store local <folder> " +
		"(durable: a restart continues the sale), or delete the order database to start a new sale"
}

// Module is the Caddy guest module seckill.stores.local: the durable store of one node, in a
// folder that one process at a time may hold.
type Module struct {
	// Dir is the folder (relative to Caddy's working directory). Placeholders such as
	// {env.SECKILL_DATA} are replaced at provisioning.
	Dir string `json:"dir,omitempty"`

	// Fsync is the flush policy, in Redis appendfsync words: "no" (the default) hands each group
	// commit to the operating system before the answers leave, which survives a crash of the
	// process; "always" also flushes it to the device, which survives a power loss.
	Fsync string `json:"fsync,omitempty"`

	dir    string // Dir with placeholders replaced, absolute, its symlinks resolved
	logger *zap.Logger
}

// Fsync policies.
const (
	fsyncNo     = "no"
	fsyncAlways = "always"
)

// waitTimeout bounds a call's wait for its commit: a stalled disk costs a buyer about a second
// before 503 busy, as the gateway's admission deadline does for a stalled Redis.
const waitTimeout = time.Second

// CaddyModule returns the Caddy module information.
func (Module) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "seckill.stores.local",
		New: func() caddy.Module { return new(Module) },
	}
}

// Provision replaces the placeholders, validates the options and resolves the folder. It opens
// nothing: the app opens the store (OpenStore) once per folder.
func (m *Module) Provision(ctx caddy.Context) error {
	m.logger = ctx.Logger()
	dir := caddy.NewReplacer().ReplaceKnown(m.Dir, "")
	switch {
	case strings.TrimSpace(m.Dir) == "":
		return errors.New("store local: the folder is required, e.g. store local ./seckill-data")
	case strings.TrimSpace(dir) == "":
		return fmt.Errorf("store local %q is empty once placeholders are replaced: set the variable", m.Dir)
	case m.Fsync != "" && m.Fsync != fsyncNo && m.Fsync != fsyncAlways:
		return fmt.Errorf("store local: fsync %q: want always or no", m.Fsync)
	}
	// One key per folder however it is written, so that a reload that spells it differently still
	// finds the store open (a second open would find the folder locked).
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("store local %s: %w", dir, err)
	}
	// A folder not created yet is resolved through its parent, so that the first start and a
	// later reload (once it exists) agree on the key when a symlink leads to it.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	} else if parent, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(parent, filepath.Base(abs))
	}
	if err := checkFolder(abs); err != nil {
		return err
	}
	m.dir = abs
	return nil
}

// checkFolder refuses a store folder that cannot be one: a file in its place, or a parent that is
// a file. A folder not created yet is fine: OpenStore creates it.
func checkFolder(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("store local %s: %w", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("store local %s is a file, not a folder: give the folder to keep the sale in "+
			"(it is created if missing)", dir)
	}
	return nil
}

// Directive names the store as the configuration gives it, for messages.
func (m *Module) Directive() string { return "store local " + m.dir }

// PoolKey identifies the store by its folder alone: one process may open a folder once, so every
// configuration naming it shares the one open store.
func (m *Module) PoolKey() string { return "local:" + m.dir }

func (m *Module) options() Options {
	return Options{FsyncAlways: m.Fsync == fsyncAlways, WaitTimeout: waitTimeout}
}

// OpenStore opens the folder, creating it when it does not exist.
func (m *Module) OpenStore() (admission.Store, error) {
	st, err := Open(m.dir, m.options())
	if errors.Is(err, ErrLocked) {
		return nil, fmt.Errorf("the folder is in use by another process (another Caddy, or a program "+
			"such as sqlite3 holding seckill.db): one process at a time may open a store folder: %w", err)
	}
	if err != nil {
		return nil, err
	}
	if n := st.Stats().Replayed; n > 0 {
		m.logger.Warn("store local replayed changes from its ring that a crash had left uncommitted",
			zap.String("dir", m.dir), zap.Uint64("changes", n))
	}
	return st, nil
}

// OpenExisting opens the folder for a tool that only reads the sale (reconcile): a folder without
// a store is an error, never a new empty store, and a folder the running Caddy holds is
// admission.ErrInUse (the tool then asks that Caddy); a database another program holds is not,
// so that its error reaches the operator.
func (m *Module) OpenExisting() (admission.Store, error) {
	switch ok, err := Exists(m.dir); {
	case err != nil:
		return nil, err
	case !ok:
		return nil, errors.New("no store in this folder (is the path relative to another working directory?): " +
			"nothing to read, and nothing was created")
	}
	st, err := Open(m.dir, m.options())
	if errors.Is(err, ErrLocked) && !errors.Is(err, errOpenElsewhere) {
		return nil, fmt.Errorf("%w: %w", admission.ErrInUse, err)
	}
	return st, err
}

// Reuse is called when a reload finds the folder's store open: the flush policy cannot change
// while the folder is open, and a store whose commit failed (a full disk) is opened again, which
// loads what was committed. A reload is the operator's way to bring it back.
func (m *Module) Reuse(s admission.Store) error {
	st, ok := s.(*Store)
	if !ok {
		return fmt.Errorf("store local %s: the pooled store is a %T", m.dir, s)
	}
	if st.FsyncAlways() != m.options().FsyncAlways {
		return fmt.Errorf("the running store has fsync %s: a reload cannot change it (the folder is "+
			"open once per process); restart Caddy to change it", fsyncWord(st.FsyncAlways()))
	}
	reopened, err := st.Reopen()
	if err != nil {
		return err
	}
	if reopened {
		m.logger.Warn("store local opened again after a failed commit", zap.String("dir", m.dir))
	}
	return nil
}

// FsyncAlways reports whether the store flushes every commit to the device (Options.FsyncAlways).
func (s *Store) FsyncAlways() bool { return s.opts.FsyncAlways }

func fsyncWord(always bool) string {
	if always {
		return fsyncAlways
	}
	return fsyncNo
}

// KeepsLine reports that the store keeps a waiting room's line, on disk like the rest of the sale:
// a restart keeps every place.
func (m *Module) KeepsLine() bool { return true }

// NeedsURLSecret says why the buy paths need a configured secret.
func (m *Module) NeedsURLSecret() string {
	return "the buy paths handed out must stay valid after a restart, which continues the sale"
}

// ForgottenSaleAdvice is what to do when the order database holds orders of a sale this store
// does not know.
func (m *Module) ForgottenSaleAdvice() string {
	return "the store folder was deleted or replaced since those orders were made. Restore it, " +
		"or delete the order database too to start a new sale"
}

// SyncsToDevice reports whether every commit is flushed to the device (fsync always), so that an
// order database beside it can do the same.
func (m *Module) SyncsToDevice() bool { return m.options().FsyncAlways }

// Interface guards
var (
	_ caddy.Module      = (*MemoryModule)(nil)
	_ caddy.Module      = (*Module)(nil)
	_ caddy.Provisioner = (*Module)(nil)
)

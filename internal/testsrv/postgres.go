package testsrv

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/proc"
)

// Postgres is a private PostgreSQL cluster: its own data directory, socket directory and loopback
// port, owned by the test that started it.
type Postgres struct {
	t      testing.TB
	Port   int
	Dir    string // holds data/, sock/ and postgres.log
	DSN    string // postgres://postgres@127.0.0.1:PORT/test?sslmode=disable
	bin    string // directory of initdb, postgres, psql
	cred   *syscall.Credential
	proc   *proc.Proc // the postmaster; nil when stopped
	stderr *os.File
}

// PostgresBinDir returns the directory holding initdb, postgres and psql, or an error that says
// how to install them.
func PostgresBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian links /usr/local/bin/initdb (or a wrapper) into PATH; resolve to the real
		// directory so the server binary of the same version is used.
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	// Highest major version first: "15" sorts after "9" numerically, not lexically.
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL not found: install postgresql (Debian: apt-get install postgresql) or run 'make test', which does")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// StartPostgres creates a private cluster in a fresh directory, starts it on a free loopback port
// with fsync off, creates the database "test" and registers its shutdown and removal with
// t.Cleanup. It never uses the machine's own server.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin, err := PostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	p := &Postgres{t: t, bin: bin}
	// initdb refuses to run as root, so as root the cluster belongs to the postgres user; a
	// t.TempDir is 0700 root and unreachable for it, hence a directory of our own.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, PostgreSQL needs the 'postgres' user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	p.Dir, err = os.MkdirTemp("", "testpg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop()
		if p.stderr != nil {
			_ = p.stderr.Close()
		}
		_ = os.RemoveAll(p.Dir)
	})
	for _, d := range []string{p.Dir, filepath.Join(p.Dir, "sock")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if p.cred != nil {
			if err := os.Chown(d, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if out, err := p.run("initdb", "-D", p.dataDir(), "-U", "postgres", "-A", "trust", "-E", "UTF8",
		"--locale=C", "--no-sync", "--no-instructions"); err != nil {
		t.Fatalf("initdb: %v: %s", err, out)
	}
	p.stderr, err = os.OpenFile(filepath.Join(p.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if p.Port, err = FreePort(); err != nil {
			t.Fatal(err)
		}
		if lastErr = p.start(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("start postgres: %v", lastErr)
	}
	if out, err := p.psql("postgres", "CREATE DATABASE test"); err != nil {
		t.Fatalf("create database: %v: %s", err, out)
	}
	p.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable", p.Port)
	return p
}

func (p *Postgres) dataDir() string { return filepath.Join(p.Dir, "data") }

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.Dir
	cmd.Env = append(os.Environ(), "PGTZ=UTC", "LC_ALL=C")
	// Pdeathsig: a test binary that dies must not leave its private server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	return cmd
}

func (p *Postgres) run(name string, args ...string) ([]byte, error) {
	return p.command(name, args...).CombinedOutput()
}

func (p *Postgres) psql(db, sql string) ([]byte, error) {
	return p.run("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port),
		"-U", "postgres", "-d", db, "-c", sql)
}

// start runs the postmaster as a child process (not daemonised through pg_ctl) so that the
// Pdeathsig above also covers it, and waits until it accepts queries.
func (p *Postgres) start() error {
	cmd := p.command("postgres", "-D", p.dataDir(), "-p", strconv.Itoa(p.Port), "-k", filepath.Join(p.Dir, "sock"),
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	ready := func() error { _, err := p.psql("postgres", "SELECT 1"); return err }
	pr, err := proc.StartReady(cmd, 30*time.Second, 50*time.Millisecond, ready)
	if err != nil {
		return fmt.Errorf("postgres on port %d: %w:\n%s", p.Port, err, proc.Tail(filepath.Join(p.Dir, "postgres.log"), 5))
	}
	p.proc = pr
	return nil
}

// Stop shuts the server down (SIGINT, fast shutdown: clients are disconnected) and waits for it
// to exit, killing it after 30 s; it is safe to call twice. The data directory is kept, so Start
// brings the same cluster back.
func (p *Postgres) Stop() {
	p.proc.StopWith(syscall.SIGINT, 30*time.Second)
	p.proc = nil
}

// Start starts a stopped server again on the same port and data directory.
func (p *Postgres) Start() {
	p.t.Helper()
	if p.proc != nil {
		return
	}
	if err := restart(p.start); err != nil {
		p.t.Fatalf("restart postgres on port %d: %v", p.Port, err)
	}
}

// Database creates a fresh database in the cluster and returns its DSN, so that tests sharing one
// cluster do not see each other's tables. t is the (sub)test asking.
func (p *Postgres) Database(t testing.TB, name string) string {
	t.Helper()
	if out, err := p.psql("postgres", fmt.Sprintf("CREATE DATABASE %q", name)); err != nil {
		t.Fatalf("create database %s: %v: %s", name, err, out)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, name)
}

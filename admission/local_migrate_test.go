package admission

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The folders in testdata/local-v1 were written by the store of schema version 1 (commit 9407f72)
// running scenario: closed/ after Close (the WAL folded in), killed/ by SIGKILL
// (TestLocalReopenAfterKill's child: the commits still in seckill.db-wal). dump.json is the
// child's state (dumpMemory) before the close or the kill.

// v1Folder copies the version-1 folder name into a new temporary folder and returns it with the
// state dumped before.
func v1Folder(t *testing.T, name string) (dir, dump string) {
	t.Helper()
	src := filepath.Join("testdata", "local-v1", name)
	dir = t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "dump.json" {
			dump = strings.TrimSpace(string(b))
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, dump
}

// localVersion reads the schema version and the wins table's columns of dir's database.
func localVersion(t *testing.T, dir string) (version string, columns []string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, localDBName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	err = eachRow(db, `SELECT name FROM pragma_table_info('wins')`, func(rows *sql.Rows) error {
		var c string
		err := rows.Scan(&c)
		columns = append(columns, c)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return version, columns
}

// TestLocalMigrateV1 opens folders written by schema version 1: the open migrates them to version
// 2 and loads the very state version 1 had, which then carries on (new wins after the migrated
// ones, replays, releases, redeliveries) and survives another close.
func TestLocalMigrateV1(t *testing.T) {
	for _, name := range []string{"closed", "killed"} {
		t.Run(name, func(t *testing.T) {
			dir, want := v1Folder(t, name)
			if v, cols := localVersion(t, dir); v != "1" || cols[0] != "activity" {
				t.Fatalf("fixture: version %q, wins columns %v; want version 1", v, cols)
			}
			clock := newFakeClock()
			clock.Add(2 * time.Minute)
			s := openLocal(t, dir, clock)
			if got := dumpJSON(t, s.mem); got != want {
				_ = s.Close()
				t.Fatalf("state after the migration:\n%s\nversion 1's:\n%s", got, want)
			}
			checkAfterReopen(t, s, clock)
			after := dumpJSON(t, s.mem)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if v, cols := localVersion(t, dir); v != localSchemaVersion || cols[0] != "seq" {
				t.Fatalf("after the migration: version %q, wins columns %v", v, cols)
			}
			s = openLocal(t, dir, clock)
			defer s.Close()
			if got := dumpJSON(t, s.mem); got != after {
				t.Fatalf("state after a second open:\n%s\nbefore its close:\n%s", got, after)
			}
		})
	}
}

// TestLocalMigrateV1Fails makes the migration's last statement fail (a trigger refuses the new
// version): the open fails naming the folder, the database is left at version 1 with its wins, and
// once the cause is gone the next open migrates it.
func TestLocalMigrateV1Fails(t *testing.T) {
	dir, want := v1Folder(t, "closed")
	path := filepath.Join(dir, localDBName)
	exec := func(q string) {
		t.Helper()
		db, err := sql.Open("sqlite", path)
		if err == nil {
			_, err = db.Exec(q)
			err = errors.Join(err, db.Close())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	exec(`CREATE TRIGGER no_v2 BEFORE UPDATE ON meta BEGIN SELECT RAISE(FAIL, 'no version 2 here'); END`)
	_, err := OpenLocalStore(dir, LocalOptions{})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("open with a failing migration = %v, want a migration error naming the folder", err)
	}
	t.Logf("open: %v", err)
	if v, cols := localVersion(t, dir); v != "1" || cols[0] != "activity" {
		t.Fatalf("after the failed migration: version %q, wins columns %v; want version 1 as it was", v, cols)
	}
	exec(`DROP TRIGGER no_v2`)
	s := openLocal(t, dir, nil)
	defer s.Close()
	if got := dumpJSON(t, s.mem); got != want {
		t.Fatalf("state after the migration:\n%s\nversion 1's:\n%s", got, want)
	}
}

package localstore

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// The folders in testdata/local-v1 and local-v2 were written by the store of schema version 1
// (commit 9407f72) and version 2 (commit 55de599) running scenario: closed/ after Close (the WAL
// folded in), killed/ by SIGKILL (TestLocalReopenAfterKill's child: the commits still in
// seckill.db-wal). dump.json is the child's state (dumpMemory) before the close or the kill.
// local-v3 was written by version 3 (commit 3b50b98) with FsyncAlways, which keeps no ring
// (a killed ring-mode folder holds a 16 MiB ring): closed/ after Close, killed/ a copy of the
// folder taken while the store was open after the scenario, as a SIGKILL leaves it.
// local-v4 was written by version 4 (commit 5e3594f) in the same way; its scenario includes the
// waiting-room lines (lineScenario), whose terms version 4 did not keep.

// oldFolder copies the folder name of schema version v into a new temporary folder and returns it
// with the state dumped before.
func oldFolder(t *testing.T, v, name string) (dir, dump string) {
	t.Helper()
	src := filepath.Join("testdata", "local-v"+v, name)
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

// localLayout reads the schema version of dir's database and the first column of its wins table
// ("activity" in version 1, "seq" in version 2, none from version 3 on), or win_log's when there
// is no wins table; "+line" follows when the database has the line table (version 4), and
// "+terms" when activities has the line's terms (version 5).
func localLayout(t *testing.T, dir string) (version, first string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dir, localDBName))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_schema WHERE name = 'line'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	line := ""
	if n == 1 {
		line = "+line"
	}
	if err := db.QueryRow(`SELECT count(*) FROM pragma_table_info('activities') WHERE name = 'line_interval_ms'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 1 {
		line += "+terms"
	}
	for _, table := range []string{"wins", "win_log"} {
		err := db.QueryRow(`SELECT name FROM pragma_table_info('` + table + `') WHERE cid = 0`).Scan(&first)
		if err == nil {
			return version, table + "." + first + line
		}
		if !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
	}
	return version, line
}

// layouts is the first column each schema version's wins table starts with (localLayout).
var layouts = map[string]string{"1": "wins.activity", "2": "wins.seq", "3": "win_log.seq", "4": "win_log.seq+line",
	localSchemaVersion: "win_log.seq+line+terms"}

// TestLocalMigrate opens folders written by schema versions 1 to 4: the open migrates them to
// this version and loads the very state the old store had, which then carries on (new wins after
// the migrated ones, replays, releases, redeliveries, and from version 3 a waiting-room line; a
// version-4 line, which kept no terms, takes its next join's) and survives another close.
func TestLocalMigrate(t *testing.T) {
	for _, v := range []string{"1", "2", "3", "4"} {
		for _, name := range []string{"closed", "killed"} {
			t.Run("v"+v+"/"+name, func(t *testing.T) {
				dir, want := oldFolder(t, v, name)
				if got, layout := localLayout(t, dir); got != v || layout != layouts[v] {
					t.Fatalf("fixture: version %q, layout %s; want version %s", got, layout, v)
				}
				if name == "killed" {
					// The old builds kept the WAL index in seckill.db-shm, and one that was killed
					// left it behind: the open must load the same state with it there (this build,
					// in exclusive mode, rebuilds the index from the WAL).
					junk := bytes.Repeat([]byte("stale wal index "), 2048)
					if err := os.WriteFile(filepath.Join(dir, localDBName+"-shm"), junk, 0o600); err != nil {
						t.Fatal(err)
					}
				}
				clock := newFakeClock()
				clock.Add(2 * time.Minute)
				s := openLocal(t, dir, clock)
				if got := dumpJSON(t, s.cur.Load().mem); got != want {
					_ = s.Close()
					t.Fatalf("state after the migration:\n%s\nversion %s's:\n%s", got, v, want)
				}
				checkAfterReopen(t, s, clock)
				if v == "4" {
					checkV4Terms(t, s)
				} else if err := lineScenario(s, s, clock); err != nil {
					t.Fatalf("a line in the migrated store: %v", err)
				}
				after := dumpJSON(t, s.cur.Load().mem)
				if !strings.Contains(after, `"LineDrawn":true`) {
					t.Fatalf("no line in the state after the line scenario: %s", after)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if got, layout := localLayout(t, dir); got != localSchemaVersion || layout != layouts[localSchemaVersion] {
					t.Fatalf("after the migration: version %q, layout %s", got, layout)
				}
				s = openLocal(t, dir, clock)
				defer s.Close()
				if got := dumpJSON(t, s.cur.Load().mem); got != after {
					t.Fatalf("state after a second open:\n%s\nbefore its close:\n%s", got, after)
				}
			})
		}
	}
}

// checkV4Terms checks a line migrated from version 4, with places but no terms: reads tell none
// (the room's own apply), and the next join fixes the line's terms, at which it moves from then.
func checkV4Terms(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	last, err := s.Place(ctx, "x", "l3")
	if err != nil || last.IntervalMS != 0 || last.SessionMS != 0 {
		t.Fatalf("a place of a version-4 line: %+v, %v; want no terms", last, err)
	}
	p, err := s.Join(ctx, "x", "l4", waitroom.Terms{Draw: 0.5, IntervalMS: 250, SessionMS: 60_000})
	if err != nil || !p.Joined || p.IntervalMS != 250 || p.SessionMS != 60_000 || p.Offset < last.Offset+250 {
		t.Fatalf("the next join in a version-4 line: %+v, %v; want the line's terms fixed, after %v", p, err, last.Offset)
	}
	if p, err := s.Join(ctx, "x", "l5", waitroom.Terms{Draw: 0.5, IntervalMS: 10, SessionMS: 1000}); err != nil || p.IntervalMS != 250 {
		t.Fatalf("a join with other terms: %+v, %v; want the line's", p, err)
	}
}

// TestLocalMigrateFails makes the migration's last statement fail (a trigger refuses the new
// version): the open fails naming the folder, the database is left at its version with its wins,
// and once the cause is gone the next open migrates it.
func TestLocalMigrateFails(t *testing.T) {
	for _, v := range []string{"1", "2", "3", "4"} {
		t.Run("v"+v, func(t *testing.T) {
			dir, want := oldFolder(t, v, "closed")
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
			exec(`CREATE TRIGGER no_upgrade BEFORE UPDATE ON meta BEGIN SELECT RAISE(FAIL, 'no upgrade here'); END`)
			_, err := Open(dir, Options{})
			if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "migrate") {
				t.Fatalf("open with a failing migration = %v, want a migration error naming the folder", err)
			}
			t.Logf("open: %v", err)
			if got, layout := localLayout(t, dir); got != v || layout != layouts[v] {
				t.Fatalf("after the failed migration: version %q, layout %s; want version %s as it was", got, layout, v)
			}
			exec(`DROP TRIGGER no_upgrade`)
			s := openLocal(t, dir, nil)
			defer s.Close()
			if got := dumpJSON(t, s.cur.Load().mem); got != want {
				t.Fatalf("state after the migration:\n%s\nversion %s's:\n%s", got, v, want)
			}
		})
	}
}

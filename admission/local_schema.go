package admission

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// localSchemaVersion is the layout below. A version-1 database (wins keyed by activity and index)
// is migrated at open (migrateLocalV1); any other version is refused.
const localSchemaVersion = "2"

// localDBName is the database file in the store's folder (with its -wal and -shm files).
const localDBName = "seckill.db"

// localSchema is one table per part of the state, so that opening the store is a load. Stock,
// buyers and request-id answers are not stored: they follow from the definitions, the wins and the
// releases. Neither is a winner's "queued" result: results holds what SetResult stored, with the
// number of wins the activity had then (after_wins) and the user's per-reservation records then
// (reservations: JSON, empty before a second reservation); the user's later wins are folded in
// at load. So a win writes one row at the end of one table, not a row at a random place in a
// second. The wins are keyed by seq, the writer's count of wins: a batch appends to the table's
// last page whichever activities it touches, where a key of (activity, index) dirtied a page per
// activity. The load reads them in seq order, in which each activity's wins come in index order.
const localSchema = `
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE activities (
	id TEXT PRIMARY KEY, stock INTEGER NOT NULL, lim INTEGER NOT NULL,
	start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, pay_ms INTEGER NOT NULL, salt TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE wins (` + localWinsColumns + `);
CREATE TABLE released (activity TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (activity, id)) WITHOUT ROWID;
CREATE TABLE results (
	activity TEXT NOT NULL, user TEXT NOT NULL, code TEXT NOT NULL, reservation_id TEXT NOT NULL,
	order_id TEXT NOT NULL, pay_before_ms INTEGER NOT NULL, after_wins INTEGER NOT NULL,
	reservations TEXT NOT NULL,
	PRIMARY KEY (activity, user)
) WITHOUT ROWID;
CREATE TABLE groups (activity TEXT NOT NULL, name TEXT NOT NULL, next INTEGER NOT NULL, PRIMARY KEY (activity, name)) WITHOUT ROWID;
CREATE TABLE pending (
	activity TEXT NOT NULL, grp TEXT NOT NULL, idx INTEGER NOT NULL, consumer TEXT NOT NULL,
	deliveries INTEGER NOT NULL, at_ns INTEGER NOT NULL, PRIMARY KEY (activity, grp, idx)
) WITHOUT ROWID;
CREATE TABLE dead (activity TEXT NOT NULL, idx INTEGER NOT NULL, deliveries INTEGER NOT NULL, reason TEXT NOT NULL);
CREATE INDEX dead_activity ON dead (activity);
`

// localWinsColumns are the columns of the wins table (version 2).
const localWinsColumns = `
	seq INTEGER PRIMARY KEY, activity TEXT NOT NULL, idx INTEGER NOT NULL, id TEXT NOT NULL, user TEXT NOT NULL,
	qty INTEGER NOT NULL, request_id TEXT NOT NULL, at_ms INTEGER NOT NULL, remaining INTEGER NOT NULL
`

// localMigrateV1 turns a version-1 database into version 2: the wins, keyed by (activity, index)
// in version 1, are copied in that order into a table keyed by seq, so each activity's wins keep
// their index order. Only the wins table changed.
const localMigrateV1 = `
CREATE TABLE wins_v2 (` + localWinsColumns + `);
INSERT INTO wins_v2 (seq, activity, idx, id, user, qty, request_id, at_ms, remaining)
	SELECT row_number() OVER (ORDER BY activity, idx), activity, idx, id, user, qty, request_id, at_ms, remaining
	FROM wins ORDER BY activity, idx;
DROP TABLE wins;
ALTER TABLE wins_v2 RENAME TO wins;
UPDATE meta SET value = '2' WHERE key = 'schema_version';
`

// localDSN is the data source of the store's one connection. synchronous=NORMAL in WAL mode
// writes each commit to the OS (a process crash loses nothing committed); FULL also syncs it to
// the device. _txlock=immediate takes the write lock at BEGIN. wal_autocheckpoint(0): the
// checkpoints run on their own connection (localCheckpointer). journal_size_limit: a WAL started
// again from its beginning is cut back to 16 MiB. WAL mode is not set here: it is
// kept in the file since its creation, and setting it would write to a file not yet checked.
func localDSN(path string, fsyncAlways bool) string {
	sync := "NORMAL"
	if fsyncAlways {
		sync = "FULL"
	}
	return path + "?_pragma=busy_timeout(5000)&_pragma=wal_autocheckpoint(0)&_pragma=journal_size_limit(16777216)&_pragma=synchronous(" + sync + ")&_txlock=immediate"
}

// openLocalDB opens dir's database, creating it when the folder has none, and checks it.
func openLocalDB(dir string, fsyncAlways bool) (*sql.DB, error) {
	if strings.ContainsAny(dir, "?#") {
		return nil, fmt.Errorf("open local store %s: %w", dir, badInput("the folder name must not contain '?' or '#'"))
	}
	path := filepath.Join(dir, localDBName)
	switch _, err := os.Stat(path); {
	case errors.Is(err, os.ErrNotExist):
		if err := createLocalDB(dir, path); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("open local store %s: %w", dir, err)
	default:
		if err := checkLocalHeader(path); err != nil {
			return nil, fmt.Errorf("open local store %s: %s is damaged or not a seckill store (it is left as it is): %w", dir, path, err)
		}
	}
	db, err := sql.Open("sqlite", localDSN(path, fsyncAlways))
	if err != nil {
		return nil, fmt.Errorf("open local store %s: %w", dir, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	version, err := checkLocalDB(db)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open local store %s: %s is damaged or not a seckill store (it is left as it is): %w", dir, path, err)
	}
	if version == "1" {
		if err := migrateLocalV1(db); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open local store %s: migrate %s from schema version 1 (it is left at version 1): %w", dir, path, err)
		}
	}
	return db, nil
}

// migrateLocalV1 migrates a version-1 database in one transaction: a crash or an error in the
// middle leaves version 1, which the next open migrates again.
func migrateLocalV1(db *sql.DB) (err error) {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.Exec(localMigrateV1); err != nil {
		return err
	}
	return tx.Commit()
}

// sqliteMagic opens every SQLite database file.
const sqliteMagic = "SQLite format 3\x00"

// checkLocalHeader reads the file's header before SQLite opens it: SQLite takes an empty file for
// a new database, and a store whose file was emptied must not start again from nothing.
func checkLocalHeader(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }() // read only: nothing to lose
	var head [100]byte
	if _, err := io.ReadFull(f, head[:]); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if string(head[:len(sqliteMagic)]) != sqliteMagic {
		return errors.New("header: not an SQLite database")
	}
	return nil
}

// checkLocalDB runs SQLite's quick_check and returns the schema version: this one or 1.
func checkLocalDB(db *sql.DB) (string, error) {
	var mode string
	if err := db.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		return "", err
	}
	if mode != "wal" {
		return "", fmt.Errorf("journal mode %q, want wal", mode)
	}
	rows, err := db.Query(`PRAGMA quick_check`)
	if err != nil {
		return "", err
	}
	var problems []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			_ = rows.Close()
			return "", err
		}
		if p != "ok" && len(problems) < 5 {
			problems = append(problems, p)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return "", err
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("quick_check: %s", strings.Join(problems, "; "))
	}
	var v string
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'schema_version'`).Scan(&v); err != nil {
		return "", fmt.Errorf("schema version: %w", err)
	}
	if v != localSchemaVersion && v != "1" {
		return "", fmt.Errorf("schema version %q, this build reads %q (and migrates \"1\")", v, localSchemaVersion)
	}
	return v, nil
}

// createLocalDB makes a new database under a temporary name and renames it into place, so that
// seckill.db exists only with its schema: a seckill.db without one is damage, never "new".
func createLocalDB(dir, path string) error {
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(path + suffix); err == nil {
			return fmt.Errorf("open local store %s: %s%s exists without %s; refusing to start an empty store over it", dir, path, suffix, path)
		}
	}
	tmp := path + ".new"
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		if err := os.Remove(tmp + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("open local store %s: %w", dir, err)
		}
	}
	db, err := sql.Open("sqlite", localDSN(tmp, true))
	if err != nil {
		return fmt.Errorf("open local store %s: create: %w", dir, err)
	}
	db.SetMaxOpenConns(1)
	_, err = db.Exec(`PRAGMA journal_mode = WAL;` + localSchema + `INSERT INTO meta (key, value) VALUES ('schema_version', '` + localSchemaVersion + `');`)
	if err == nil {
		// Fold the WAL into the file, so the rename moves everything.
		_, err = db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("open local store %s: create %s: %w", dir, path, err)
	}
	return nil
}

// syncDir flushes dir's entries, so a rename survives a power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

package localstore

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"modernc.org/sqlite" // also the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// localSchemaVersion is the layout below. A database of version 1 (a row per win, keyed by
// activity and index), 2 (a row per win, keyed by seq), 3 (no waiting-room line) or 4 (no line
// terms) is migrated at open (migrateLocal); any other version is refused.
const localSchemaVersion = "5"

// localDBName is the database file in the store's folder (with its -wal and -shm files).
const localDBName = "seckill.db"

// localSchema is one table per part of the state, so that opening the store is a load. Stock,
// buyers and request-id answers are not stored: they follow from the definitions, the wins and the
// releases. Neither is a winner's "queued" result: results holds what SetResult stored, with the
// number of wins the activity had then (after_wins) and the user's per-reservation records then
// (reservations: JSON, empty before a second reservation); the user's later wins are folded in
// at load. So a commit's wins go to the end of one table and nowhere else: one win_log row holds
// them all, packed (winlog.go), keyed by seq, the writer's count of wins at the first of
// them. The load reads the rows in seq order, in which each activity's wins come in index order.
// line holds the waiting room's places (changeJoin), activities.line_drawn whether the early
// joiners were ranked (changeDraw), and line_interval_ms and line_session_ms the line's terms,
// its first join's (changeTerms; 0 before it); the ranks follow from them at load (memLine.load).
const localSchema = `
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE activities (
	id TEXT PRIMARY KEY, stock INTEGER NOT NULL, lim INTEGER NOT NULL,
	start_ms INTEGER NOT NULL, end_ms INTEGER NOT NULL, pay_ms INTEGER NOT NULL, salt TEXT NOT NULL,
	line_drawn INTEGER NOT NULL DEFAULT 0,
	line_interval_ms REAL NOT NULL DEFAULT 0, line_session_ms INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
` + localWinLogTable + localLineTable + `
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

// localLineTable is the waiting room's line: a row per place, the early joiner's draw or the late
// joiner's offset in at, and the interval the line moved at when a late joiner came.
const localLineTable = `
CREATE TABLE line (
	activity TEXT NOT NULL, user TEXT NOT NULL, early INTEGER NOT NULL, at REAL NOT NULL, interval_ms REAL NOT NULL,
	PRIMARY KEY (activity, user)
) WITHOUT ROWID;
`

// localMigrateV3 adds the line to a version-3 database: its table, empty, and every activity's
// line not drawn (there was none to draw).
const localMigrateV3 = localLineTable + `
ALTER TABLE activities ADD COLUMN line_drawn INTEGER NOT NULL DEFAULT 0;
UPDATE meta SET value = '4' WHERE key = 'schema_version';
`

// localMigrateV4 adds the line's terms to a version-4 database: 0, none kept, for every line (a
// line with places takes its next join's).
const localMigrateV4 = `
ALTER TABLE activities ADD COLUMN line_interval_ms REAL NOT NULL DEFAULT 0;
ALTER TABLE activities ADD COLUMN line_session_ms INTEGER NOT NULL DEFAULT 0;
UPDATE meta SET value = '5' WHERE key = 'schema_version';
`

// localWinsColumns are the columns of version 2's wins table, a row per win.
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

// localDSN is the data source of the store's one connection. locking_mode=EXCLUSIVE, first so that
// it precedes every read: the connection holds the file's lock from its first read until it
// closes, and keeps the WAL index in its own memory instead of a -shm file, which spares each commit
// six fcntl calls (a third of its CPU, docs/BENCHMARKS.md); the folder's LOCK already keeps every
// other process out. synchronous=NORMAL in WAL mode writes each commit to the OS (a process
// crash loses nothing committed); FULL also syncs it to the device. _txlock=immediate takes the
// write lock at BEGIN. wal_autocheckpoint(0): the writer checkpoints between batches
// (checkpoint.go). journal_size_limit: a WAL started again from its beginning is cut back to
// 16 MiB. WAL mode is not set here: it is kept in the file since its creation, and setting it
// would write to a file not yet checked.
func localDSN(path string, fsyncAlways bool) string {
	sync := "NORMAL"
	if fsyncAlways {
		sync = "FULL"
	}
	return path + "?_pragma=locking_mode(EXCLUSIVE)&_pragma=busy_timeout(5000)&_pragma=wal_autocheckpoint(0)&_pragma=journal_size_limit(16777216)&_pragma=synchronous(" + sync + ")&_txlock=immediate"
}

// openLocalDB opens dir's database, creating it when the folder has none, and checks it.
func openLocalDB(dir string, fsyncAlways bool) (*sql.DB, error) {
	if strings.ContainsAny(dir, "?#") {
		return nil, fmt.Errorf("open local store %s: %w", dir, admission.BadInput("the folder name must not contain '?' or '#'"))
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
		if sqliteBusy(err) {
			// The folder's LOCK was ours, yet SQLite waited out busy_timeout: some other program
			// (a sqlite3 shell, a backup tool) has the database open. Busy is not damage.
			return nil, fmt.Errorf("open local store %s: %s %w (SQLite: %w): %w", dir, path, errOpenElsewhere, err, ErrLocked)
		}
		return nil, fmt.Errorf("open local store %s: %s is damaged or not a seckill store (it is left as it is): %w", dir, path, err)
	}
	if version != localSchemaVersion {
		if err := migrateLocal(db, version); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("open local store %s: migrate %s from schema version %s (it is left at version %s): %w", dir, path, version, version, err)
		}
	}
	return db, nil
}

// migrateLocal brings a database of version 1 to 4 to this version in one transaction: a crash
// or an error in the middle leaves the old version, which the next open migrates again.
func migrateLocal(db *sql.DB, version string) (err error) {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if version == "1" {
		if _, err := tx.Exec(localMigrateV1); err != nil {
			return fmt.Errorf("to version 2: %w", err)
		}
	}
	if version == "1" || version == "2" {
		if err := migrateLocalV2(tx); err != nil {
			return fmt.Errorf("to version 3: %w", err)
		}
	}
	if version != "4" {
		if _, err := tx.Exec(localMigrateV3); err != nil {
			return fmt.Errorf("to version 4: %w", err)
		}
	}
	if _, err := tx.Exec(localMigrateV4); err != nil {
		return fmt.Errorf("to version 5: %w", err)
	}
	return tx.Commit()
}

// migrateLocalV2 packs version 2's wins, a row each, into win_log rows in seq order, numbered
// again from 1 (seq only orders them), and drops the old table.
func migrateLocalV2(tx *sql.Tx) error {
	if _, err := tx.Exec(localWinLogTable); err != nil {
		return err
	}
	rows, err := tx.Query(`SELECT activity, idx, id, user, qty, request_id, at_ms, remaining FROM wins ORDER BY seq`)
	if err != nil {
		return err
	}
	var wins []packedWin
	for rows.Next() {
		var w packedWin
		if err := rows.Scan(&w.act, &w.idx, &w.entry.id, &w.entry.user, &w.entry.qty, &w.entry.requestID, &w.entry.atMS, &w.remaining); err != nil {
			_ = rows.Close()
			return err
		}
		wins = append(wins, w)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	var row winLogRow
	insert := func(seq int64, n int, data []byte) error {
		_, err := tx.Exec(localWinLogInsert, seq, n, data)
		return err
	}
	for i := range wins {
		w := &wins[i]
		if row.add(int64(i+1), w.act, w.idx, &w.entry, w.remaining) {
			if err := row.flush(insert); err != nil {
				return err
			}
		}
	}
	if err := row.flush(insert); err != nil {
		return err
	}
	_, err = tx.Exec(`DROP TABLE wins; UPDATE meta SET value = '3' WHERE key = 'schema_version';`)
	return err
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

// checkLocalDB runs SQLite's quick_check and returns the schema version: this one, or 1 to 4.
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
	if v != localSchemaVersion && v != "1" && v != "2" && v != "3" && v != "4" {
		return "", fmt.Errorf("schema version %q, this build reads %q (and migrates \"1\" to \"4\")", v, localSchemaVersion)
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
		err = publish(tmp, path, dir)
	}
	if err != nil {
		return fmt.Errorf("open local store %s: create %s: %w", dir, path, err)
	}
	return nil
}

// publish renames the finished file tmp to path in dir and flushes the folder's entries, so that
// path appears whole or not at all, and stays after a power loss.
func publish(tmp, path, dir string) error {
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir flushes dir's entries, so a rename survives a power loss.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// sqliteBusy reports whether err is SQLite's "database is locked" (SQLITE_BUSY or SQLITE_LOCKED).
func sqliteBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

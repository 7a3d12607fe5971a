package localstore

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
)

// localRingMeta is what the database says of the ring: the journal number of the last change
// committed (journal_seq), the epoch of the last opening (ring_epoch), and the epoch of the last
// opening that closed cleanly, with every change committed (ring_clean); each 0 when absent.
type localRingMeta struct {
	journal, epoch, clean uint64
}

func readLocalRingMeta(db *sql.DB) (localRingMeta, error) {
	var m localRingMeta
	err := eachRow(db, `SELECT key, value FROM meta WHERE key IN ('journal_seq', 'ring_epoch', 'ring_clean')`, func(rows *sql.Rows) error {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return fmt.Errorf("meta %s: %w", k, err)
		}
		switch k {
		case "journal_seq":
			m.journal = n
		case "ring_epoch":
			m.epoch = n
		case "ring_clean":
			m.clean = n
		}
		return nil
	})
	return m, err
}

// localSetMeta stores one meta value (its key, then the value).
const localSetMeta = `INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value`

// setLocalMeta stores v under each of keys, in one transaction.
func setLocalMeta(db *sql.DB, v uint64, keys ...string) error {
	tx, err := db.Begin()
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, err := tx.Exec(localSetMeta, k, strconv.FormatUint(v, 10)); err != nil {
			return errors.Join(err, tx.Rollback())
		}
	}
	return tx.Commit()
}

// errRingMissing is a folder whose ring is gone while it may hold changes that were answered.
var errRingMissing = errors.New("the ring file is missing, and the store was not closed cleanly: it may hold answered changes not yet in the database")

// replayRing opens dir's ring and commits, through w, the changes it holds beyond the database's
// last commit, so that every change a caller was answered for is in the database. It returns the
// ring, or nil when the store runs without one (fsyncAlways: every answer waits for its commit;
// a ring left by an earlier opening is replayed and closed), the new opening's epoch (stored
// before it returns) and the journal number of its first change's predecessor, and how many
// changes it replayed.
func replayRing(db *sql.DB, dir string, w *localWriter, fsyncAlways bool) (ring *localRing, epoch, base uint64, replayed int, err error) {
	meta, err := readLocalRingMeta(db)
	if err != nil {
		return nil, 0, 0, 0, fmt.Errorf("ring: %w", err)
	}
	// A new ring only where the last opening had none or closed cleanly.
	clean := meta.epoch == 0 || meta.clean == meta.epoch
	r, err := openLocalRing(dir, !fsyncAlways && clean)
	if err != nil {
		if clean {
			err = fmt.Errorf("%w; the store was closed cleanly, so the ring holds nothing the database lacks: removing %s is safe", err, localRingName)
		}
		return nil, 0, 0, 0, fmt.Errorf("ring: %w", err)
	}
	// r, not ring: a return with an error has set ring to nil before this runs.
	defer func() {
		if r != nil && (err != nil || fsyncAlways) {
			err = errors.Join(err, r.close())
			ring = nil
		}
	}()
	if r == nil && !clean {
		return nil, 0, 0, 0, fmt.Errorf("ring: %w; restore %s to the folder", errRingMissing, localRingName)
	}
	base = meta.journal
	if r != nil && meta.epoch != 0 {
		changes, err := r.changesAfter(meta.journal, meta.epoch)
		if err != nil {
			return nil, 0, 0, 0, fmt.Errorf("ring: %w", err)
		}
		if len(changes) > 0 {
			base += uint64(len(changes))
			if err := w.commit(changes, base); err != nil {
				return nil, 0, 0, 0, fmt.Errorf("ring: replay %d changes after %d: %w", len(changes), meta.journal, err)
			}
			replayed = len(changes)
		}
	}
	// A random epoch, never a count: a count starts again at 1 in a new database beside an old ring,
	// and comes again after a power loss took back the commit that stored it, and either time
	// the ring's slots of the old opening with that number would be replayed as this one's.
	for epoch == 0 || epoch == meta.epoch || epoch == meta.clean {
		epoch = rand.Uint64()
	}
	keys := []string{"ring_epoch"}
	if fsyncAlways {
		// An opening without a ring answers nothing from one: it is clean from its start, and a
		// crash of it must not ask for a ring that never was.
		keys = append(keys, "ring_clean")
	}
	if err := setLocalMeta(db, epoch, keys...); err != nil {
		return nil, 0, 0, 0, fmt.Errorf("ring: new epoch: %w", err)
	}
	return r, epoch, base, replayed, nil
}

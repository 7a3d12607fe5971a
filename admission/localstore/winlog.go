package localstore

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A win_log row holds the wins of one commit, packed one after the other (schema version 3). A
// win is, in order: the activity, its index in the activity, the entry id, the user, the qty, the
// request id, the time (ms) and the stock left after it; each string as a uvarint length and its
// bytes, each number as a (u)varint. One row per commit instead of one per win: the writer binds
// one blob where it bound nine values a win, and SQLite builds one record.

// localWinLogMax is the size at which the writer starts another row within a commit, so that a
// long batch (after a stall) does not make one huge row that a delete must rewrite whole.
const localWinLogMax = 64 << 10

// localWinLogTable is win_log's definition; localWinLogInsert writes one row of it.
const (
	localWinLogTable  = `CREATE TABLE win_log (seq INTEGER PRIMARY KEY, n INTEGER NOT NULL, data BLOB NOT NULL);`
	localWinLogInsert = `INSERT INTO win_log (seq, n, data) VALUES (?, ?, ?)`
)

// winLogRow gathers wins into one win_log row: n of them, the first numbered seq.
type winLogRow struct {
	data []byte
	n    int
	seq  int64
}

// add packs win number seq onto the row and reports whether the row is full (localWinLogMax).
func (r *winLogRow) add(seq int64, act string, idx int, e *memEntry, remaining int64) (full bool) {
	if r.n == 0 {
		r.seq = seq
	}
	r.data = appendWin(r.data, act, idx, e, remaining)
	r.n++
	return len(r.data) >= localWinLogMax
}

// flush writes the row, if it holds any win, with insert (localWinLogInsert's arguments) and
// empties it for the next.
func (r *winLogRow) flush(insert func(seq int64, n int, data []byte) error) error {
	if r.n == 0 {
		return nil
	}
	err := insert(r.seq, r.n, r.data)
	r.data, r.n = r.data[:0], 0
	return err
}

// appendWin packs one win onto b.
func appendWin(b []byte, act string, idx int, e *memEntry, remaining int64) []byte {
	b = appendString(b, act)
	b = binary.AppendUvarint(b, uint64(idx))
	b = appendString(b, e.id)
	b = appendString(b, e.user)
	b = binary.AppendVarint(b, e.qty)
	b = appendString(b, e.requestID)
	b = binary.AppendVarint(b, e.atMS)
	return binary.AppendVarint(b, remaining)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// packedWin is one win read back from a win_log row.
type packedWin struct {
	act       string
	idx       int
	entry     memEntry
	remaining int64
}

// errWinLog is a win_log row that does not decode: damage the load refuses.
var errWinLog = errors.New("malformed win_log row")

// decodeWins calls fn for each of the n wins packed in data, in order. The strings are copies:
// data may be reused by the caller.
func decodeWins(data []byte, n int, fn func(*packedWin) error) error {
	d := winDecoder{b: data}
	var w packedWin
	for i := range n {
		d.win(&w)
		if d.err {
			return fmt.Errorf("%w: win %d of %d", errWinLog, i+1, n)
		}
		if err := fn(&w); err != nil {
			return err
		}
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%w: %d bytes after its %d wins", errWinLog, len(d.b), n)
	}
	return nil
}

// winDecoder reads a win_log row; err is set at the first malformed field, after which every
// read returns zero.
type winDecoder struct {
	b   []byte
	err bool
}

// win reads one win that appendWin packed.
func (d *winDecoder) win(w *packedWin) {
	w.act = d.string()
	w.idx = int(d.uvarint())
	w.entry.id = d.string()
	w.entry.user = d.string()
	w.entry.qty = d.varint()
	w.entry.requestID = d.string()
	w.entry.atMS = d.varint()
	w.remaining = d.varint()
}

func (d *winDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err, d.b = true, nil
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint undoes binary.AppendVarint's zig-zag on a uvarint.
func (d *winDecoder) varint() int64 {
	u := d.uvarint()
	x := int64(u >> 1)
	if u&1 != 0 {
		x = ^x
	}
	return x
}

func (d *winDecoder) string() string {
	n := d.uvarint()
	if d.err || n > uint64(len(d.b)) {
		d.err, d.b = true, nil
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

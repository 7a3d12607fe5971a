package localstore

import "iter"

// entryTable is an activity's wins queue, entry by entry, kept where the garbage collector does
// not look (as the users are, user.go): fixed-size blocks of pointer-free slots, and the entries'
// ids, users and request ids copied into a byte arena. The queue holds every win of the sale and
// never shrinks (XLEN counts all), so a slice of memEntry, three strings each, was scanned on every
// collection, and each append beyond its capacity copied all of it under the activity's lock.
type entryTable struct {
	blocks [][]entrySlot // entry i is blocks[i/memUserBlock][i%memUserBlock]
	n      int
	arena  byteArena
}

// entrySlot is a memEntry in an entryTable.
type entrySlot struct {
	id, user, requestID arenaRef
	qty, atMS, idMS     int64
	idSeq               uint64
}

// len returns the number of entries.
func (t *entryTable) len() int { return t.n }

// slot returns entry i's slot.
func (t *entryTable) slot(i int) *entrySlot {
	return &t.blocks[i/memUserBlock][i%memUserBlock]
}

// at returns entry i. Its strings are views of the arena, which never changes them: they may be
// kept, handed out and compared like any string.
func (t *entryTable) at(i int) memEntry {
	s := t.slot(i)
	return memEntry{
		id: t.arena.string(s.id), user: t.arena.string(s.user), requestID: t.arena.string(s.requestID),
		qty: s.qty, atMS: s.atMS, idMS: s.idMS, idSeq: s.idSeq,
	}
}

// id returns entry i's id, a view of the arena.
func (t *entryTable) id(i int) string { return t.arena.string(t.slot(i).id) }

// requestID returns entry i's request id, a view of the arena.
func (t *entryTable) requestID(i int) string { return t.arena.string(t.slot(i).requestID) }

// add appends e, its strings copied into the arena.
func (t *entryTable) add(e memEntry) {
	if t.n%memUserBlock == 0 {
		t.blocks = append(t.blocks, make([]entrySlot, memUserBlock))
	}
	*t.slot(t.n) = entrySlot{
		id: t.arena.add(e.id), user: t.arena.add(e.user), requestID: t.arena.add(e.requestID),
		qty: e.qty, atMS: e.atMS, idMS: e.idMS, idSeq: e.idSeq,
	}
	t.n++
}

// all yields every entry with its index, in order.
func (t *entryTable) all() iter.Seq2[int, memEntry] {
	return func(yield func(int, memEntry) bool) {
		for i := range t.n {
			if !yield(i, t.at(i)) {
				return
			}
		}
	}
}

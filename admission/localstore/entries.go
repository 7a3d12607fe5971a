package localstore

import "iter"

// entryTable is an activity's wins queue, entry by entry, kept where the garbage collector does
// not look (as the users are, user.go): fixed-size blocks of pointer-free slots, and the entries'
// ids, users and request ids copied into a byte arena. The queue holds every win of the sale and
// never shrinks (XLEN counts all), so a slice of memEntry, three strings each, was scanned on every
// collection, and each append beyond its capacity copied all of it under the activity's lock.
type entryTable struct {
	slots blockList[entrySlot]
	arena byteArena
}

// entrySlot is a memEntry in an entryTable.
type entrySlot struct {
	id, user, requestID arenaRef
	qty, atMS, idMS     int64
	idSeq               uint64
}

// len returns the number of entries.
func (t *entryTable) len() int { return t.slots.len() }

// slot returns entry i's slot.
func (t *entryTable) slot(i int) *entrySlot { return t.slots.at(i) }

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
	_, s := t.slots.add()
	*s = entrySlot{
		id: t.arena.add(e.id), user: t.arena.add(e.user), requestID: t.arena.add(e.requestID),
		qty: e.qty, atMS: e.atMS, idMS: e.idMS, idSeq: e.idSeq,
	}
}

// all yields every entry with its index, in order.
func (t *entryTable) all() iter.Seq2[int, memEntry] {
	return func(yield func(int, memEntry) bool) {
		for i := range t.len() {
			if !yield(i, t.at(i)) {
				return
			}
		}
	}
}

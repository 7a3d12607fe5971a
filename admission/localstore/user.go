package localstore

import (
	"hash/maphash"
	"strconv"
	"unsafe"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// A Memory keeps everything it knows of one user in one activity in one memUser, found with one
// lookup, rather than in four maps keyed by user (buyers, answers, results, per-reservation
// results).
//
// Users are the store's largest and fastest-growing state (one per winner, for the sale's life),
// so they are kept where the garbage collector does not look: memUsers hold no pointer and live
// in fixed-size blocks, user ids and order ids are copied into a byte arena, and the index maps a
// hash of the id to a block position (map[uint64]uint32). A mark phase then scans a few block and
// chunk headers instead of every user's map entry, strings and records, which made the GC's mark
// phase the main cause of the buy path's tail under load (docs/BENCHMARKS.md, "Where the tail
// and a Redis buy's time go"). A winner's usual state, one win and the record of its
// reservation (the "queued" of the win, then each result the order backend sets for it), stays in
// the memUser. A user whose state is more than that (a second win, a second reservation's record,
// a result without a win) also gets a memUserExt, which holds pointers: those are the few, and
// they are scanned.

// memUserAnswers is how many request-id answers a user keeps in a slice, searched in order; past
// it they move to a map, so a user who wins and releases again and again is still found at once.
const memUserAnswers = 8

// memOrderIDMax is the longest order id a memUser keeps in the arena; a longer one, which no
// order backend sends, goes to a memUserExt, so the arena holds no outsized string.
const memOrderIDMax = 255

// memUser is one user's state in an activity, without pointers. It exists once the user has won
// or has a result, and is never removed while the activity lives (results survive releases).
type memUser struct {
	name arenaRef // the user id, in the table's arena
	next uint32   // 1 + position of the next user whose id has the same hash; 0: none
	ext  uint32   // 1 + index of the user's memUserExt; 0: the user has none
	held int64    // items held (:buyers); 0 when the user holds nothing, and is then no buyer

	// A simple user's whole state besides held is one win, first, and one record of its
	// reservation, rec. Set on a new user's first win; a memUserExt takes over at a change rec
	// cannot hold (promote).
	first memAnswer
	rec   memRecord // the zero memRecord: the user is not simple
}

// simple reports whether u's state is its first win and rec.
func (u *memUser) simple() bool { return u.rec.code != 0 }

// memRecord is a simple user's result record, without pointers: its ReservationID is the one
// win's, its OrderID is in the table's arena.
type memRecord struct {
	code      uint8    // 1 + index of Code in admission.ResultCodes() (recordCode)
	order     arenaRef // OrderID; once set to a non-empty id it only changes in a memUserExt
	payBefore int64    // PayBeforeMS
}

// recordCode returns a memRecord's code for a result code, 0 for an unknown one.
func recordCode(code string) uint8 {
	for i, c := range admission.ResultCodes() {
		if c == code {
			return uint8(i) + 1
		}
	}
	return 0
}

// memUserExt is the state of a user that is more than one win and a memRecord: the records and
// answers as FoldResult and addAnswer keep them.
type memUserExt struct {
	hasResult bool               // result is set (:results <user>)
	result    admission.Result   // latest record, without Reservations
	resvs     []admission.Result // per-reservation records once there are two (:results <user>\0...)

	// The first answer to each of the user's winning request ids (:req). Only a win stores an
	// answer. answers holds them while there are at most memUserAnswers, then byReq does.
	answers []memAnswer
	byReq   map[string]memAnswer
}

// memAnswer is the stored answer to a winning request: the win is entries[entry] (its reservation
// id and request id), remaining the stock the answer reported.
type memAnswer struct {
	entry     int
	remaining int64
}

// userTable maps user ids to their memUsers.
type userTable struct {
	seed  maphash.Seed
	hash  func(maphash.Seed, string) uint64 // maphash.String; tests make ids collide
	index map[uint64]uint32                 // hash of a user id → 1 + position of the first user with that hash
	users blockList[memUser]
	names byteArena // user ids and the memRecords' order ids
	exts  blockList[memUserExt]
}

func newUserTable() userTable {
	return userTable{seed: maphash.MakeSeed(), hash: maphash.String, index: make(map[uint64]uint32)}
}

// find returns user name's state, or nil, and the hash of name, for add.
func (t *userTable) find(name string) (*memUser, uint64) {
	h := t.hash(t.seed, name)
	for p := t.index[h]; p != 0; {
		u := t.users.at(int(p - 1))
		if t.names.string(u.name) == name {
			return u, h
		}
		p = u.next
	}
	return nil, h
}

// add returns a new, empty user name, whose hash h find returned: name must not be in the table.
func (t *userTable) add(name string, h uint64) *memUser {
	p, u := t.users.add()
	*u = memUser{name: t.names.add(name), next: t.index[h]}
	t.index[h] = uint32(p) + 1
	return u
}

// each calls f with every user and its id; f must not keep the id.
func (t *userTable) each(f func(name string, u *memUser)) {
	for p := range t.users.len() {
		u := t.users.at(p)
		f(t.names.string(u.name), u)
	}
}

// extOf returns u's memUserExt, nil if u has none.
func (t *userTable) extOf(u *memUser) *memUserExt {
	if u.ext == 0 {
		return nil
	}
	return t.exts.at(int(u.ext - 1))
}

// addExt gives u an empty memUserExt; u has none.
func (t *userTable) addExt(u *memUser) *memUserExt {
	i, x := t.exts.add()
	u.ext = uint32(i) + 1
	return x
}

// blockLen is how many elements a block of a blockList holds.
const blockLen = 1 << 12

// blockList is a list that grows by fixed-size blocks: a block never moves, so a pointer to an
// element stays valid while the list lives, and growing copies nothing. Of pointer-free elements
// the collector scans only the block headers.
type blockList[T any] struct {
	blocks [][]T // element i is blocks[i/blockLen][i%blockLen]
	n      int
}

// len returns the number of elements.
func (l *blockList[T]) len() int { return l.n }

// at returns element i.
func (l *blockList[T]) at(i int) *T { return &l.blocks[i/blockLen][i%blockLen] }

// add appends a zero element and returns its index and itself.
func (l *blockList[T]) add() (int, *T) {
	if l.n%blockLen == 0 {
		l.blocks = append(l.blocks, make([]T, blockLen))
	}
	l.n++
	return l.n - 1, l.at(l.n - 1)
}

// arenaRef is a string in a byteArena: its chunk, offset and length.
type arenaRef struct {
	chunk uint32
	off   uint16
	n     uint16
}

// byteArenaChunk is the size of a byteArena's chunks; a string is at most 64 KiB - 1.
const byteArenaChunk = 1 << 16

// byteArena keeps strings in large byte chunks, which hold no pointers and are never moved or
// changed once written: a string read from it is a view, allocated once for many strings.
type byteArena struct {
	chunks [][]byte
}

// add copies s into the arena. Every string the stores keep is far shorter than a chunk (user
// ids, request ids, entry ids: admission.MaxUserIDLen at most); a longer one is a bug.
func (b *byteArena) add(s string) arenaRef {
	if len(s) >= byteArenaChunk {
		panic("localstore: a string of " + strconv.Itoa(len(s)) + " bytes in a byte arena")
	}
	last := len(b.chunks) - 1
	if last < 0 || len(b.chunks[last])+len(s) > byteArenaChunk {
		b.chunks = append(b.chunks, make([]byte, 0, byteArenaChunk))
		last++
	}
	c := b.chunks[last]
	ref := arenaRef{chunk: uint32(last), off: uint16(len(c)), n: uint16(len(s))}
	b.chunks[last] = append(c, s...)
	return ref
}

// string returns the string at r: a view of the arena's bytes, which are never written again.
func (b *byteArena) string(r arenaRef) string {
	if r.n == 0 {
		return ""
	}
	return unsafe.String(&b.chunks[r.chunk][r.off], int(r.n))
}

// findUser returns user name's state, or nil. The caller holds a.mu.
func (a *memActivity) findUser(name string) *memUser {
	u, _ := a.users.find(name)
	return u
}

// user returns user's state, created empty when the user is new. The caller holds a.mu.
func (a *memActivity) user(name string) *memUser {
	u, h := a.users.find(name)
	if u == nil {
		u = a.users.add(name, h)
	}
	return u
}

// record returns simple user u's result record.
func (a *memActivity) record(u *memUser) admission.Result {
	return admission.Result{
		Code:          admission.ResultCodes()[u.rec.code-1],
		ReservationID: a.entries.id(u.first.entry),
		OrderID:       a.users.names.string(u.rec.order),
		PayBeforeMS:   u.rec.payBefore,
	}
}

// keepRecord makes r simple user u's record, if its memRecord can hold it: a record of u's
// win's reservation, with a known code, and u's order id or u's first one. It reports whether
// it did; if not, u is unchanged.
func (a *memActivity) keepRecord(u *memUser, r admission.Result) bool {
	if !u.simple() || r.ReservationID != a.entries.id(u.first.entry) {
		return false
	}
	code := recordCode(r.Code)
	if code == 0 {
		return false
	}
	order := u.rec.order
	// The arena is append-only: a user adds one order id to it at most, and a change of order
	// id, rare, goes to a memUserExt.
	if cur := a.users.names.string(order); r.OrderID != cur {
		if cur != "" || len(r.OrderID) > memOrderIDMax {
			return false
		}
		order = a.users.names.add(r.OrderID)
	}
	u.rec = memRecord{code: code, order: order, payBefore: r.PayBeforeMS}
	return true
}

// promote gives u a memUserExt holding its state, if it has none, and returns it.
func (a *memActivity) promote(u *memUser) *memUserExt {
	if x := a.users.extOf(u); x != nil {
		return x
	}
	x := a.users.addExt(u)
	if u.simple() {
		x.answers = append(make([]memAnswer, 0, 2), u.first)
		x.result, x.hasResult = a.record(u), true
		u.rec = memRecord{}
	}
	return x
}

// result returns u's latest record and per-reservation records, and whether it has a result.
func (a *memActivity) result(u *memUser) (top admission.Result, resvs []admission.Result, ok bool) {
	if u.simple() {
		return a.record(u), nil, true
	}
	if x := a.users.extOf(u); x != nil {
		return x.result, x.resvs, x.hasResult
	}
	return admission.Result{}, nil, false
}

// answer returns u's stored answer to request id req, if u won with it.
func (a *memActivity) answer(u *memUser, req string) (admission.Decision, bool) {
	var ans memAnswer
	found := false
	switch x := a.users.extOf(u); {
	case u.simple():
		ans, found = u.first, a.entries.requestID(u.first.entry) == req
	case x == nil:
	case x.byReq != nil:
		ans, found = x.byReq[req]
	default:
		for _, y := range x.answers {
			if a.entries.requestID(y.entry) == req {
				ans, found = y, true
				break
			}
		}
	}
	if !found {
		return admission.Decision{}, false
	}
	// The won qty, from the win's entry: the repeat may ask for another.
	return admission.Decision{Outcome: admission.Won, ReservationID: a.entries.id(ans.entry), Remaining: ans.remaining,
		Qty: a.entries.slot(ans.entry).qty}, true
}

// eachWin calls f with the entry index of each of u's wins, released ones included, in no
// particular order.
func (a *memActivity) eachWin(u *memUser, f func(entry int)) {
	switch x := a.users.extOf(u); {
	case u.simple():
		f(u.first.entry)
	case x == nil:
	case x.byReq != nil:
		for _, y := range x.byReq {
			f(y.entry)
		}
	default:
		for _, y := range x.answers {
			f(y.entry)
		}
	}
}

// addWin stores the answer to u's win at entries[entry], whose request id u has not won with,
// without folding the win's record. It reports whether that record is u's whole record already:
// a new user's first win, the most common state by far, is kept simple (no pointer, no
// allocation), its "queued" record implied.
func (a *memActivity) addWin(u *memUser, entry int, remaining int64) bool {
	ans := memAnswer{entry: entry, remaining: remaining}
	if u.ext == 0 && !u.simple() {
		u.first, u.rec = ans, memRecord{code: recordCode("queued")}
		return true
	}
	a.addAnswer(u, ans)
	return false
}

// recordWin records u's win at entries[entry], whose request id u has not won with: its answer,
// and its "queued" record folded into u's results (admission.FoldResult).
func (a *memActivity) recordWin(u *memUser, entry int, remaining int64) {
	if !a.addWin(u, entry, remaining) {
		a.fold(u, admission.Result{Code: "queued", ReservationID: a.entries.id(entry)}, true)
	}
}

// addAnswer stores the answer ans to a win whose request id u has not won with.
func (a *memActivity) addAnswer(u *memUser, ans memAnswer) {
	x := a.promote(u)
	if x.byReq != nil {
		x.byReq[a.entries.requestID(ans.entry)] = ans
		return
	}
	if len(x.answers) < memUserAnswers {
		x.answers = append(x.answers, ans)
		return
	}
	x.byReq = make(map[string]memAnswer, 2*memUserAnswers)
	for _, y := range x.answers {
		x.byReq[a.entries.requestID(y.entry)] = y
	}
	x.byReq[a.entries.requestID(ans.entry)] = ans
	x.answers = nil
}

// take adds qty to the items u holds, counting u as a buyer if it held none.
func (a *memActivity) take(u *memUser, qty int64) {
	if u.held == 0 {
		a.holders++
	}
	u.held += qty
}

// give takes qty back from the items user holds; a user left holding nothing is no buyer any more
// (as Redis's HINCRBY then HDEL of :buyers).
func (a *memActivity) give(user string, qty int64) {
	u := a.findUser(user)
	if u == nil || u.held == 0 {
		return
	}
	if u.held -= qty; u.held <= 0 {
		u.held = 0
		a.holders--
	}
}

// fold folds a record into u's records (FoldResult); the caller holds a.mu. A simple user stays
// simple when the folded record is still one of its reservation's that its memRecord can hold.
func (a *memActivity) fold(u *memUser, r admission.Result, win bool) {
	if u.simple() {
		top, list := admission.FoldResult(a.record(u), true, nil, r, win)
		if list == nil && a.keepRecord(u, top) {
			return
		}
	}
	x := a.promote(u)
	top, list := admission.FoldResult(x.result, x.hasResult, x.resvs, r, win)
	x.result, x.hasResult = top, true
	if list != nil {
		x.resvs = list
	}
}

// setResult replaces u's records with a loaded record r and its per-reservation records resvs
// (nil: none).
func (a *memActivity) setResult(u *memUser, r admission.Result, resvs []admission.Result) {
	if resvs == nil && a.keepRecord(u, r) {
		return
	}
	x := a.promote(u)
	if resvs != nil {
		x.resvs = resvs
	}
	x.result, x.hasResult = r, true
}

package localstore

import "github.com/caddy-seckill/caddy-seckill/admission"

// A Memory keeps everything it knows of one user in one activity in one memUser, found with
// one map lookup, rather than in four maps keyed by user (buyers, answers, results, per-reservation
// results): a win then costs three map operations (the user's lookup, the insert of a new user,
// the entry id's insert) instead of about nine, and the garbage collector scans one big map.

// memUserAnswers is how many request-id answers a user keeps in a slice, searched in order; past
// it they move to a map, so a user who wins and releases again and again is still found at once.
const memUserAnswers = 8

// memUser is one user's state in an activity. It exists once the user has won or has a result,
// and is never removed while the activity lives (results survive releases).
type memUser struct {
	held      int64              // items held (:buyers); 0 when the user holds nothing, and is then no buyer
	hasResult bool               // result is set (:results <user>)
	result    admission.Result   // latest record, without Reservations
	resvs     []admission.Result // per-reservation records once there are two (:results <user>\0...)

	// The first answer to each of the user's winning request ids (:req). Only a win stores an
	// answer. answers holds them while there are at most memUserAnswers, then byReq does.
	answers []memAnswer
	byReq   map[string]memAnswer
	first   [1]memAnswer // answers' first backing array: a user's first win allocates no slice
}

// memAnswer is the stored answer to a winning request: the win is entries[entry] (its reservation
// id and request id), remaining the stock the answer reported.
type memAnswer struct {
	entry     int
	remaining int64
}

// user returns user's state, created empty when the user is new. The caller holds a.mu.
func (a *memActivity) user(name string) *memUser {
	u := a.users[name]
	if u == nil {
		u = a.newUser()
		a.users[name] = u
	}
	return u
}

// newUser returns an empty memUser, not yet in a.users, whose answers use its inline array. Users
// live as long as their activity, so they are carved from blocks (8, 16, ... 256 users): one
// allocation serves many new users instead of one each.
func (a *memActivity) newUser() *memUser {
	if len(a.userBlock) == cap(a.userBlock) {
		a.userBlock = make([]memUser, 0, min(max(2*cap(a.userBlock), 8), 256))
	}
	a.userBlock = append(a.userBlock, memUser{}) // within capacity: earlier users do not move
	u := &a.userBlock[len(a.userBlock)-1]
	u.answers = u.first[:0]
	return u
}

// answer returns u's stored answer to request id req, if u won with it.
func (a *memActivity) answer(u *memUser, req string) (admission.Decision, bool) {
	var ans memAnswer
	found := false
	if u.byReq != nil {
		ans, found = u.byReq[req]
	} else {
		for _, x := range u.answers {
			if a.entries[x.entry].requestID == req {
				ans, found = x, true
				break
			}
		}
	}
	if !found {
		return admission.Decision{}, false
	}
	return admission.Decision{Outcome: admission.Won, ReservationID: a.entries[ans.entry].id, Remaining: ans.remaining}, true
}

// addAnswer stores the answer to the win at entries[entry], whose request id u has not won with.
func (a *memActivity) addAnswer(u *memUser, entry int, remaining int64) {
	ans := memAnswer{entry: entry, remaining: remaining}
	if u.byReq != nil {
		u.byReq[a.entries[entry].requestID] = ans
		return
	}
	if len(u.answers) < memUserAnswers {
		u.answers = append(u.answers, ans)
		return
	}
	u.byReq = make(map[string]memAnswer, 2*memUserAnswers)
	for _, x := range u.answers {
		u.byReq[a.entries[x.entry].requestID] = x
	}
	u.byReq[a.entries[entry].requestID] = ans
	u.answers = nil
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
	u := a.users[user]
	if u == nil || u.held == 0 {
		return
	}
	if u.held -= qty; u.held <= 0 {
		u.held = 0
		a.holders--
	}
}

// fold folds a record into u's records (FoldResult); the caller holds a.mu.
func (u *memUser) fold(r admission.Result, win bool) {
	top, list := admission.FoldResult(u.result, u.hasResult, u.resvs, r, win)
	u.result, u.hasResult = top, true
	if list != nil {
		u.resvs = list
	}
}

package localstore

import "github.com/caddy-seckill/caddy-seckill/admission"

// Views of a memActivity's per-user state in the shape of the maps Redis keeps (:buyers, :req,
// :results and the per-reservation records), for tests that compare or inspect whole states. The
// caller holds a.mu.

// reqKey is a request id scoped to its user.
type reqKey struct{ user, id string }

// buyersView returns user → items held, for users holding any (HGETALL :buyers).
func (a *memActivity) buyersView() map[string]int64 {
	m := map[string]int64{}
	a.users.each(func(name string, u *memUser) {
		if u.held > 0 {
			m[name] = u.held
		}
	})
	return m
}

// answersView returns "user/request id" → the stored first answer, for every win. An answer's
// Qty is its entry's, which the dump holds already: it is left out when it is that one, so the
// view keeps the shape the dumps of earlier builds (testdata) have, and any other shows.
func (a *memActivity) answersView() map[string]admission.Decision {
	m := map[string]admission.Decision{}
	for _, e := range a.entries.all() {
		if d, ok := a.answerFor(e.user, e.requestID); ok {
			if d.Qty == e.qty {
				d.Qty = 0
			}
			m[e.user+"/"+e.requestID] = d
		}
	}
	return m
}

// answerFor returns user's stored answer to request id req.
func (a *memActivity) answerFor(user, req string) (admission.Decision, bool) {
	u := a.findUser(user)
	if u == nil {
		return admission.Decision{}, false
	}
	return a.answer(u, req)
}

// resultsView returns user → latest result record, for users that have one.
func (a *memActivity) resultsView() map[string]admission.Result {
	m := map[string]admission.Result{}
	a.users.each(func(name string, u *memUser) {
		if top, _, ok := a.result(u); ok {
			m[name] = top
		}
	})
	return m
}

// resvsView returns user → per-reservation records, for users that have them.
func (a *memActivity) resvsView() map[string][]admission.Result {
	m := map[string][]admission.Result{}
	a.users.each(func(name string, u *memUser) {
		if _, resvs, _ := a.result(u); resvs != nil {
			m[name] = resvs
		}
	})
	return m
}

package localstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// memLine is an activity's waiting-room line, with the scores of redisstore's line_join.lua: an
// early joiner's lottery draw, a late joiner's admission offset. The early joiners are ranked
// once, by draw, when the start has passed (or the first late joiner comes), and keep that rank;
// late joiners are appended, so no call walks the line. The first join fixes the line's terms
// (interval, session; waitroom.Terms). With a journal (Store), the terms, every place taken and
// the draw are recorded under mu, and a load rebuilds the line from them (loadLine).
type memLine struct {
	mu     sync.Mutex
	gone   bool // the activity was deleted (Delete sets it under mu): a join that waited is refused
	places map[string]*memPlace
	early  []*memPlace // by draw (then user) once drawn
	drawn  bool        // the early joiners are ranked
	late   []float64   // the late joiners' offsets, in join order: strictly increasing
	tat    float64     // the next free offset, once a late joiner came
	// interval (ms) and session (ms) are the line's terms, its first join's; 0 before it (or
	// for a line loaded from a store that kept none, which takes the next join's).
	interval float64
	session  int64
}

// memPlace is one user's place.
type memPlace struct {
	user   string
	early  bool
	draw   float64
	rank   int64 // once drawn (early), or from the join (late)
	offset float64
}

var _ waitroom.Line = (*Memory)(nil)

// lineStart returns the activity's line and its start, without holding the activity's lock (so a
// join never waits for an admission).
func (s *Memory) lineStart(id string) (*memLine, time.Time, error) {
	if err := memCheckActivity(id); err != nil {
		return nil, time.Time{}, err
	}
	a, err := s.lock(id)
	if err != nil {
		return nil, time.Time{}, err
	}
	start := a.def.Start
	a.mu.Unlock()
	return &a.line, start, nil
}

// Join implements waitroom.Line.
func (s *Memory) Join(ctx context.Context, activity, user string, t waitroom.Terms) (waitroom.Place, error) {
	if err := ctx.Err(); err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, err)
	}
	if err := admission.CheckUserID(user); err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, err)
	}
	if !(t.Draw >= 0 && t.Draw < 1) || !(t.IntervalMS > 0) || t.SessionMS <= 0 {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity,
			admission.BadInput("draw %v, interval %v ms, session %d ms", t.Draw, t.IntervalMS, t.SessionMS))
	}
	l, start, err := s.lineStart(activity)
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, err)
	}
	now := s.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gone {
		// Deleted after lineStart found it: the delete is journaled, and a join recorded after it
		// would be a place in no activity.
		return waitroom.Place{}, fmt.Errorf("join line %s: activity %s: %w", activity, activity, admission.ErrUnknownActivity)
	}
	if l.places == nil {
		l.places = make(map[string]*memPlace)
	}
	if l.interval <= 0 {
		l.interval, l.session = t.IntervalMS, t.SessionMS
		s.journal(memChange{kind: changeTerms, act: activity, interval: t.IntervalMS, at: float64(t.SessionMS)})
	}
	p, ok := l.places[user]
	if !ok {
		p = &memPlace{user: user}
		if now.UnixMilli() < start.UnixMilli() && !l.drawn {
			p.early, p.draw = true, t.Draw
			l.early = append(l.early, p)
			s.journal(memChange{kind: changeJoin, act: activity, user: user, early: true, at: t.Draw})
		} else {
			s.drawLine(activity, l)
			if len(l.late) == 0 {
				l.tat = float64(len(l.early)) * l.interval
			}
			p.offset = math.Max(float64(now.UnixMilli()-start.UnixMilli()), l.tat)
			l.tat = p.offset + l.interval
			p.rank = int64(len(l.early) + len(l.late))
			l.late = append(l.late, p.offset)
			s.journal(memChange{kind: changeJoin, act: activity, user: user, at: p.offset, interval: l.interval})
		}
		l.places[user] = p
	}
	out := s.linePlace(activity, l, p, now, start)
	out.Joined = !ok
	return out, nil
}

// Place implements waitroom.Line.
func (s *Memory) Place(ctx context.Context, activity, user string) (waitroom.Place, error) {
	if err := ctx.Err(); err != nil {
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, err)
	}
	l, start, err := s.lineStart(activity)
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, err)
	}
	now := s.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.places[user]
	if !ok {
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, waitroom.ErrNotInLine)
	}
	return s.linePlace(activity, l, p, now, start), nil
}

// Tally implements waitroom.Line.
func (s *Memory) Tally(ctx context.Context, activity string, lags ...time.Duration) (waitroom.Tally, error) {
	if err := ctx.Err(); err != nil {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: %w", activity, err)
	}
	l, start, err := s.lineStart(activity)
	if err != nil {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: %w", activity, err)
	}
	now := s.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := waitroom.Tally{Now: now, Length: int64(len(l.places)), EarlyCount: int64(len(l.early)),
		IntervalMS: l.interval, SessionMS: l.session}
	for _, lag := range lags {
		t.LateAdmitted = append(t.LateAdmitted, l.lateAdmitted(now.UnixMilli()-lag.Milliseconds()-start.UnixMilli()))
	}
	return t, nil
}

// linePlace is p as the store reads it at now, in activity act's line l, which it ranks once the
// start has passed; the caller holds l.mu.
func (s *Memory) linePlace(act string, l *memLine, p *memPlace, now, start time.Time) waitroom.Place {
	since := now.UnixMilli() - start.UnixMilli()
	if since >= 0 {
		s.drawLine(act, l)
	}
	out := waitroom.Place{Now: time.UnixMilli(now.UnixMilli()), Early: p.early, Rank: p.rank, Offset: p.offset,
		EarlyCount: int64(len(l.early)), LateAdmitted: l.lateAdmitted(since), IntervalMS: l.interval, SessionMS: l.session}
	if p.early && !l.drawn {
		out.Rank = -1
	}
	return out
}

// drawLine ranks the early joiners of act's line l, once, and journals that it did: a line drawn
// stays drawn after a restart, even if a forced redefinition moved the start later, so that no
// early joiner comes in among ranks already told. The caller holds l.mu.
func (s *Memory) drawLine(act string, l *memLine) {
	if l.drawn {
		return
	}
	l.draw()
	s.journal(memChange{kind: changeDraw, act: act})
}

// draw ranks the early joiners by their draws: Redis's order of equal scores (the user's bytes)
// breaks ties. The caller holds l.mu.
func (l *memLine) draw() {
	slices.SortFunc(l.early, func(a, b *memPlace) int {
		return cmp.Or(cmp.Compare(a.draw, b.draw), cmp.Compare(a.user, b.user))
	})
	for i, p := range l.early {
		p.rank = int64(i)
	}
	l.drawn = true
}

// lateAdmitted counts the late joiners whose offset is at most upto ms.
func (l *memLine) lateAdmitted(upto int64) int64 {
	if upto < 0 {
		return 0
	}
	return int64(sort.Search(len(l.late), func(i int) bool { return l.late[i] > float64(upto) }))
}

// lineRow is one place as the line table keeps it (changeJoin's fields).
type lineRow struct {
	user         string
	early        bool
	at, interval float64
}

// load rebuilds line l from its rows, in any order, whether it was drawn and its terms (0 when
// none were kept): early joiners by their draws, late joiners in the order of their offsets,
// which is their join order (each offset follows the last by an interval), and the next late
// joiner's offset after the last one's.
func (l *memLine) load(rows []lineRow, drawn bool, interval float64, session int64) error {
	if !(interval >= 0) || session < 0 || (interval > 0) != (session > 0) {
		return fmt.Errorf("terms: interval %v ms, session %d ms", interval, session)
	}
	l.interval, l.session = interval, session
	l.places = make(map[string]*memPlace, len(rows))
	type latePlace struct {
		p        *memPlace
		interval float64
	}
	var late []latePlace
	for _, r := range rows {
		if _, dup := l.places[r.user]; dup {
			return fmt.Errorf("user %q holds two places", r.user)
		}
		p := &memPlace{user: r.user, early: r.early}
		switch {
		case r.early && !(r.at >= 0 && r.at < 1):
			return fmt.Errorf("user %q: draw %v out of [0, 1)", r.user, r.at)
		case r.early:
			p.draw = r.at
			l.early = append(l.early, p)
		case !(r.interval > 0):
			return fmt.Errorf("user %q: interval %v ms", r.user, r.interval)
		default:
			p.offset = r.at
			late = append(late, latePlace{p, r.interval})
		}
		l.places[r.user] = p
	}
	slices.SortFunc(late, func(a, b latePlace) int { return cmp.Compare(a.p.offset, b.p.offset) })
	for i, lp := range late {
		if i > 0 && !(lp.p.offset > late[i-1].p.offset) {
			return fmt.Errorf("users %q and %q share the offset %v", late[i-1].p.user, lp.p.user, lp.p.offset)
		}
		lp.p.rank = int64(len(l.early) + i)
		l.late = append(l.late, lp.p.offset)
	}
	if n := len(late); n > 0 {
		l.tat = late[n-1].p.offset + late[n-1].interval
	}
	if drawn || len(late) > 0 {
		l.draw()
	}
	return nil
}

var _ waitroom.Line = (*Store)(nil)

// Join implements waitroom.Line: the place is answered once it is safe from a crash (in the ring,
// or committed), so a place told to a buyer is there after a restart.
func (s *Store) Join(ctx context.Context, activity, user string, t waitroom.Terms) (waitroom.Place, error) {
	return call(s, ctx, func(m *Memory) (waitroom.Place, error) { return m.Join(ctx, activity, user, t) },
		func(err error) error { return fmt.Errorf("join line %s: %w", activity, err) })
}

// Place implements waitroom.Line.
func (s *Store) Place(ctx context.Context, activity, user string) (waitroom.Place, error) {
	return call(s, ctx, func(m *Memory) (waitroom.Place, error) { return m.Place(ctx, activity, user) },
		func(err error) error { return fmt.Errorf("line place %s: %w", activity, err) })
}

// Tally implements waitroom.Line.
func (s *Store) Tally(ctx context.Context, activity string, lags ...time.Duration) (waitroom.Tally, error) {
	return call(s, ctx, func(m *Memory) (waitroom.Tally, error) { return m.Tally(ctx, activity, lags...) },
		func(err error) error { return fmt.Errorf("line tally %s: %w", activity, err) })
}

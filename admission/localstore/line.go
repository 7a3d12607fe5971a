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
// late joiners are appended, so no call walks the line.
type memLine struct {
	mu     sync.Mutex
	places map[string]*memPlace
	early  []*memPlace // by draw (then user) once drawn
	drawn  bool        // the early joiners are ranked
	late   []float64   // the late joiners' offsets, in join order: strictly increasing
	tat    float64     // the next free offset, once a late joiner came
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
	if !(t.Draw >= 0 && t.Draw < 1) || !(t.IntervalMS > 0) {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, admission.BadInput("draw %v, interval %v ms", t.Draw, t.IntervalMS))
	}
	l, start, err := s.lineStart(activity)
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, err)
	}
	now := s.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.places == nil {
		l.places = make(map[string]*memPlace)
	}
	p, ok := l.places[user]
	if !ok {
		p = &memPlace{user: user}
		if now.UnixMilli() < start.UnixMilli() && !l.drawn {
			p.early, p.draw = true, t.Draw
			l.early = append(l.early, p)
		} else {
			l.draw()
			if len(l.late) == 0 {
				l.tat = float64(len(l.early)) * t.IntervalMS
			}
			p.offset = math.Max(float64(now.UnixMilli()-start.UnixMilli()), l.tat)
			l.tat = p.offset + t.IntervalMS
			p.rank = int64(len(l.early) + len(l.late))
			l.late = append(l.late, p.offset)
		}
		l.places[user] = p
	}
	out := l.place(p, now, start)
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
	return l.place(p, now, start), nil
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
	t := waitroom.Tally{Now: now, Length: int64(len(l.places)), EarlyCount: int64(len(l.early))}
	for _, lag := range lags {
		t.LateAdmitted = append(t.LateAdmitted, l.lateAdmitted(now.UnixMilli()-lag.Milliseconds()-start.UnixMilli()))
	}
	return t, nil
}

// place is p as the store reads it at now; the caller holds l.mu.
func (l *memLine) place(p *memPlace, now, start time.Time) waitroom.Place {
	since := now.UnixMilli() - start.UnixMilli()
	if since >= 0 {
		l.draw()
	}
	out := waitroom.Place{Now: time.UnixMilli(now.UnixMilli()), Early: p.early, Rank: p.rank, Offset: p.offset,
		EarlyCount: int64(len(l.early)), LateAdmitted: l.lateAdmitted(since)}
	if p.early && !l.drawn {
		out.Rank = -1
	}
	return out
}

// draw ranks the early joiners by their draws, once: Redis's order of equal scores (the user's
// bytes) breaks ties. The caller holds l.mu.
func (l *memLine) draw() {
	if l.drawn {
		return
	}
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

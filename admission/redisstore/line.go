package redisstore

import (
	"context"
	_ "embed" // the line's scripts ship inside the binary
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// The waiting-room line lives in the activity's hash tag, beside its stock: P:{A}:line (sorted
// set user → score) and P:{A}:line_state (hash: tat; drawn, once the start has passed: the
// early joiners are ranked for good, even if a forced redefinition moves the start later;
// interval and session, the line's terms, its first join's). One
// script call per join or read, on one slot, so it works on Cluster and moves with the
// activity's master through a failover.
var (
	//go:embed lua/line_join.lua
	luaLineJoin string
	//go:embed lua/line_place.lua
	luaLinePlace string
	//go:embed lua/line_tally.lua
	luaLineTally string

	scriptLineJoin  = redis.NewScript(luaLineJoin)
	scriptLinePlace = redis.NewScript(luaLinePlace)
	scriptLineTally = redis.NewScript(luaLineTally)
)

var _ waitroom.Line = (*Store)(nil)

// Join implements waitroom.Line.
func (s *Store) Join(ctx context.Context, activity, user string, t waitroom.Terms) (waitroom.Place, error) {
	if err := checkLineArgs(activity, user); err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, err)
	}
	if !(t.Draw >= 0 && t.Draw < 1) || !(t.IntervalMS > 0) || t.SessionMS <= 0 {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity,
			admission.BadInput("draw %v, interval %v ms, session %d ms", t.Draw, t.IntervalMS, t.SessionMS))
	}
	keys := []string{s.key(activity, "meta"), s.key(activity, "line"), s.key(activity, "line_state")}
	v, err := scriptLineJoin.Run(ctx, s.client, keys, user,
		strconv.FormatFloat(t.Draw, 'g', -1, 64), strconv.FormatFloat(t.IntervalMS, 'g', -1, 64), t.SessionMS).Slice()
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, redisScriptErr(err))
	}
	if len(v) != 8 {
		return waitroom.Place{}, fmt.Errorf("join line %s: unexpected reply %v", activity, v)
	}
	p, err := linePlace(v[1:])
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, err)
	}
	p.Joined = v[0] == int64(1)
	return p, nil
}

// Place implements waitroom.Line.
func (s *Store) Place(ctx context.Context, activity, user string) (waitroom.Place, error) {
	if err := checkLineArgs(activity, user); err != nil {
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, err)
	}
	keys := []string{s.key(activity, "meta"), s.key(activity, "line"), s.key(activity, "line_state")}
	v, err := scriptLinePlace.Run(ctx, s.client, keys, user).Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, waitroom.ErrNotInLine)
	case err != nil:
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, redisScriptErr(err))
	}
	p, err := linePlace(v)
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("line place %s: %w", activity, err)
	}
	return p, nil
}

// Tally implements waitroom.Line.
func (s *Store) Tally(ctx context.Context, activity string, lags ...time.Duration) (waitroom.Tally, error) {
	if !admission.ValidActivityID(activity) {
		return waitroom.Tally{}, fmt.Errorf("line tally: %w", admission.BadInput("activity id %q", activity))
	}
	args := make([]any, len(lags))
	for i, l := range lags {
		args[i] = l.Milliseconds()
	}
	keys := []string{s.key(activity, "meta"), s.key(activity, "line"), s.key(activity, "line_state")}
	v, err := scriptLineTally.Run(ctx, s.client, keys, args...).Slice()
	if err != nil {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: %w", activity, redisScriptErr(err))
	}
	if len(v) != 5+len(lags) {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: unexpected reply %v", activity, v)
	}
	n := make([]int64, 0, len(v)-1)
	for i, x := range v {
		if i == 3 {
			continue // the interval, a string
		}
		k, ok := x.(int64)
		if !ok {
			return waitroom.Tally{}, fmt.Errorf("line tally %s: unexpected reply %v", activity, v)
		}
		n = append(n, k)
	}
	interval, err := lineInterval(v[3])
	if err != nil {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: %w", activity, err)
	}
	return waitroom.Tally{Now: time.UnixMilli(n[0]), Length: n[1], EarlyCount: n[2], IntervalMS: interval, SessionMS: n[3],
		LateAdmitted: n[4:]}, nil
}

func checkLineArgs(activity, user string) error {
	if !admission.ValidActivityID(activity) {
		return admission.BadInput("activity id %q", activity)
	}
	return admission.CheckUserID(user)
}

// lineInterval decodes the line's interval, a double as a string ("0": no terms kept).
func lineInterval(v any) (float64, error) {
	str, _ := v.(string)
	f, err := strconv.ParseFloat(str, 64)
	if err != nil || !(f >= 0) {
		return 0, fmt.Errorf("line interval %v", v)
	}
	return f, nil
}

// linePlace decodes {score, rank, early_count, late_admitted, now_ms, interval_ms, session_ms}.
func linePlace(v []any) (waitroom.Place, error) {
	if len(v) != 7 {
		return waitroom.Place{}, fmt.Errorf("unexpected reply %v", v)
	}
	str, _ := v[0].(string)
	score, err := strconv.ParseFloat(str, 64)
	rank, ok1 := v[1].(int64)
	early, ok2 := v[2].(int64)
	late, ok3 := v[3].(int64)
	now, ok4 := v[4].(int64)
	session, ok5 := v[6].(int64)
	interval, ierr := lineInterval(v[5])
	if err != nil || ierr != nil || !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return waitroom.Place{}, fmt.Errorf("unexpected reply %v", v)
	}
	p := waitroom.Place{Now: time.UnixMilli(now), Rank: rank, EarlyCount: early, LateAdmitted: late, Early: score < 1,
		IntervalMS: interval, SessionMS: session}
	if !p.Early {
		p.Offset = score - 1
	}
	return p, nil
}

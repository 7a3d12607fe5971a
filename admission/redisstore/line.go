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
// early joiners are ranked for good, even if a forced redefinition moves the start later). One
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
	if !(t.Draw >= 0 && t.Draw < 1) || !(t.IntervalMS > 0) {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, admission.BadInput("draw %v, interval %v ms", t.Draw, t.IntervalMS))
	}
	keys := []string{s.key(activity, "meta"), s.key(activity, "line"), s.key(activity, "line_state")}
	v, err := scriptLineJoin.Run(ctx, s.client, keys, user,
		strconv.FormatFloat(t.Draw, 'g', -1, 64), strconv.FormatFloat(t.IntervalMS, 'g', -1, 64)).Slice()
	if err != nil {
		return waitroom.Place{}, fmt.Errorf("join line %s: %w", activity, redisScriptErr(err))
	}
	if len(v) != 6 {
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
	v, err := scriptLineTally.Run(ctx, s.client, []string{s.key(activity, "meta"), s.key(activity, "line")}, args...).Int64Slice()
	if err != nil {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: %w", activity, redisScriptErr(err))
	}
	if len(v) != 3+len(lags) {
		return waitroom.Tally{}, fmt.Errorf("line tally %s: unexpected reply %v", activity, v)
	}
	return waitroom.Tally{Now: time.UnixMilli(v[0]), Length: v[1], EarlyCount: v[2], LateAdmitted: v[3:]}, nil
}

func checkLineArgs(activity, user string) error {
	if !admission.ValidActivityID(activity) {
		return admission.BadInput("activity id %q", activity)
	}
	return admission.CheckUserID(user)
}

// linePlace decodes {score, rank, early_count, late_admitted, now_ms}.
func linePlace(v []any) (waitroom.Place, error) {
	if len(v) != 5 {
		return waitroom.Place{}, fmt.Errorf("unexpected reply %v", v)
	}
	str, _ := v[0].(string)
	score, err := strconv.ParseFloat(str, 64)
	rank, ok1 := v[1].(int64)
	early, ok2 := v[2].(int64)
	late, ok3 := v[3].(int64)
	now, ok4 := v[4].(int64)
	if err != nil || !ok1 || !ok2 || !ok3 || !ok4 {
		return waitroom.Place{}, fmt.Errorf("unexpected reply %v", v)
	}
	p := waitroom.Place{Now: time.UnixMilli(now), Rank: rank, EarlyCount: early, LateAdmitted: late, Early: score < 1}
	if !p.Early {
		p.Offset = score - 1
	}
	return p, nil
}

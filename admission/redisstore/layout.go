package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// Key layouts (docs/admission.md, "A one-field-per-user layout"). An activity's :meta field
// 'layout' says which scripts and keys serve it: none is layout 1 (admit.lua, release.lua,
// set_result.lua; :buyers, :req, :resv, a "queued" record per win), "2" the one-field-per-user
// layout (admit_v2.lua, release_v2.lua, set_result_v2.lua; :users, one stream entry per call).
// Define writes it only into an activity it creates (Options.Layout), so an activity keeps
// its layout for its life; buckets get their parent's. Every script checks the field before it
// writes and errors LAYOUT on the other layout's activity, so a stale cached layout never writes
// one layout into the other: the store then reads the layout again and retries once.

const (
	redisLayout1 = 1
	redisLayout2 = 2
)

// parentActivity returns the activity whose definition holds the layout of on, an activity or
// one of its buckets (bucketID: '#' is outside the activity id alphabet).
func parentActivity(on string) string {
	if i := strings.IndexByte(on, '#'); i >= 0 {
		return on[:i]
	}
	return on
}

// layoutOf returns the layout of on (an activity or a bucket), cached per activity beside its
// bucket count (readShape). An activity not defined yet answers 1, uncached: its scripts then
// answer UNKNOWN_ACTIVITY.
func (s *Store) layoutOf(ctx context.Context, on string) (int, error) {
	p := parentActivity(on)
	if v, ok := s.layoutCache.Load(p); ok {
		return v.(int), nil
	}
	_, l, err := s.readShape(ctx, p)
	return l, err
}

// relayout drops on's cached layout after a script refused it (LAYOUT: the activity was deleted
// and defined again with the other layout, by another node) and reads it again.
func (s *Store) relayout(ctx context.Context, on string) (int, error) {
	s.layoutCache.Delete(parentActivity(on))
	return s.layoutOf(ctx, on)
}

// layoutRetry runs f with on's layout; when a script refuses it (ErrLayout), the layout is read
// again and f runs once more if it changed. The refusing script wrote nothing, so the retry is
// safe; a refusal that persists is returned (ErrLayout).
func layoutRetry[T any](ctx context.Context, s *Store, on string, f func(layout int) (T, error)) (T, error) {
	l, err := s.layoutOf(ctx, on)
	if err != nil {
		var zero T
		return zero, fmt.Errorf("layout of %s: %w", on, err)
	}
	v, err := f(l)
	if !errors.Is(err, admission.ErrLayout) {
		return v, err
	}
	m, lerr := s.relayout(ctx, on)
	if lerr != nil || m == l {
		return v, err
	}
	return f(m)
}

// layoutArg is define.lua's and bucket_define.lua's layout argument for an activity they create.
func (s *Store) layoutArg() string {
	if s.layout == redisLayout2 {
		return "2"
	}
	return ""
}

// userField is what layout 2 keeps per user in :users (admit_v2.lua's header): the items held,
// how many of the wins' "queued" records set_result_v2.lua has written into :results, and the
// reservation ids of the user's wins, oldest first.
type userField struct {
	held   int64
	folded int
	ids    []string
}

// parseUserField reads a :users field: "<held> <folded>\n" then per win
// "<length of the request id>:<request id><reservation id>;".
func parseUserField(v string) (userField, error) {
	var f userField
	head, rest, ok := strings.Cut(v, "\n")
	h, fo, ok2 := strings.Cut(head, " ")
	var err1, err2 error
	f.held, err1 = strconv.ParseInt(h, 10, 64)
	f.folded, err2 = strconv.Atoi(fo)
	if !ok || !ok2 || err1 != nil || err2 != nil {
		return userField{}, fmt.Errorf("malformed users field %q", v)
	}
	for rest != "" {
		l, after, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(l)
		if !ok || err != nil || n < 0 || n > len(after) {
			return userField{}, fmt.Errorf("malformed users field %q", v)
		}
		end := strings.IndexByte(after[n:], ';')
		if end < 0 {
			return userField{}, fmt.Errorf("malformed users field %q", v)
		}
		f.ids = append(f.ids, after[n:n+end])
		rest = after[n+end+1:]
	}
	if f.folded > len(f.ids) {
		return userField{}, fmt.Errorf("malformed users field %q: %d folded of %d wins", v, f.folded, len(f.ids))
	}
	return f, nil
}

// unfolded returns the reservation ids whose "queued" records are not in :results yet.
func (f userField) unfolded() []string { return f.ids[f.folded:] }

// foldWins folds the "queued" record of each win in ids, in order, into a user's latest record
// and per-reservation records, as admit.lua's record_win writes them at each win (and
// set_result_v2.lua before it folds a record): what a poll of layout 2 shows for the wins
// set_result_v2.lua has not folded yet.
func foldWins(top admission.Result, hasTop bool, list []admission.Result, ids []string) (admission.Result, []admission.Result) {
	for _, id := range ids {
		top, list = admission.FoldResult(top, hasTop, list, admission.Result{Code: "queued", ReservationID: id}, true)
		hasTop = true
	}
	return top, list
}

// readResultV2 is getResultOn for a layout-2 key set on: the stored records (readResultV2Raw),
// then the records of the user's reservations if they have a list, and the unfolded wins folded
// in. found is false when the user has neither a record nor a win.
func (s *Store) readResultV2(ctx context.Context, on, user string) (r admission.Result, found bool, err error) {
	top, list, ids, err := s.readResultV2Raw(ctx, on, user)
	if err != nil || (top == "" && len(ids) == 0) {
		return admission.Result{}, false, err
	}
	return s.foldResultV2(ctx, on, user, top, list, ids)
}

// foldResultV2 decodes the stored records top and list (as withReservations) and folds the wins
// ids into them.
func (s *Store) foldResultV2(ctx context.Context, on, user, top, list string, ids []string) (r admission.Result, found bool, err error) {
	if top != "" {
		if r, err = s.withReservations(ctx, on, user, top, list); err != nil {
			return admission.Result{}, false, err
		}
	}
	if len(ids) > 0 {
		t, l := foldWins(admission.WithoutReservations(r), top != "", r.Reservations, ids)
		r = t
		r.Reservations = l
	}
	return r, true, nil
}

// readResultV2Raw reads the user's latest record and list of reservation ids from :results and
// their :users field in one round trip (the keys share a slot), and returns the reservation ids of
// the wins not folded into :results yet.
func (s *Store) readResultV2Raw(ctx context.Context, on, user string) (top, list string, ids []string, err error) {
	var res, fld *redis.SliceCmd
	_, err = s.hot.Pipelined(ctx, func(p redis.Pipeliner) error {
		res = p.HMGet(ctx, s.key(on, "results"), user, user+"\x00")
		fld = p.HMGet(ctx, s.key(on, "users"), user)
		return nil
	})
	if err != nil {
		return "", "", nil, err
	}
	rv, fv := res.Val(), fld.Val()
	if len(rv) != 2 || len(fv) != 1 {
		return "", "", nil, fmt.Errorf("malformed hmget reply: %d and %d elements", len(rv), len(fv))
	}
	top, _ = rv[0].(string)
	list, _ = rv[1].(string)
	if v, ok := fv[0].(string); ok {
		f, err := parseUserField(v)
		if err != nil {
			return "", "", nil, err
		}
		ids = f.unfolded()
	}
	return top, list, ids, nil
}

// holdersV2 lists the users of a layout-2 key set on who hold items (held above 0 in :users;
// a field stays at 0, as it also keeps the user's answers), scanning the hash in steps so that a
// large sale does not block the server.
func (s *Store) holdersV2(ctx context.Context, on string) ([]string, error) {
	var users []string
	var cursor uint64
	for {
		kv, next, err := s.client.HScan(ctx, s.key(on, "users"), cursor, "", 512).Result()
		if err != nil {
			return nil, err
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f, err := parseUserField(kv[i+1])
			if err != nil {
				return nil, fmt.Errorf("user %q: %w", kv[i], err)
			}
			if f.held > 0 {
				users = append(users, kv[i])
			}
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	// HSCAN may return a field twice (the hash was resized meanwhile).
	return uniqueStrings(users), nil
}

// uniqueStrings drops repeats from v, keeping the first of each.
func uniqueStrings(v []string) []string {
	seen := make(map[string]struct{}, len(v))
	out := v[:0]
	for _, x := range v {
		if _, dup := seen[x]; !dup {
			seen[x] = struct{}{}
			out = append(out, x)
		}
	}
	return out
}

package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// userField is what an activity keeps per user in :users (lua/admit.lua's header): the items
// held, how many of the wins' "queued" records set_result.lua has written into :results, and the
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

// holdersOn lists the users of the key set on (an activity or a bucket) who hold items (held
// above 0 in :users; a field stays at 0, as it also keeps the user's answers), scanning the hash in
// steps so that a large sale does not block the server.
func (s *Store) holdersOn(ctx context.Context, on string) ([]string, error) {
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

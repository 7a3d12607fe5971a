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

// parseUserField reads a :users field (scanUserField).
func parseUserField(v string) (userField, error) {
	var f userField
	held, folded, _, err := scanUserField(v, func(_, resv string) { f.ids = append(f.ids, resv) })
	if err != nil {
		return userField{}, err
	}
	f.held, f.folded = held, folded
	return f, nil
}

// scanUserField reads a :users field: "<held> <folded>\n" then per win
// "<length of the request id>:<request id><reservation id>;". It calls win with each win's
// request id and reservation id, oldest first (views of v), and returns held, folded and the
// number of wins.
func scanUserField(v string, win func(req, resv string)) (held int64, folded, wins int, err error) {
	head, rest, ok := strings.Cut(v, "\n")
	h, fo, ok2 := strings.Cut(head, " ")
	var err1, err2 error
	held, err1 = strconv.ParseInt(h, 10, 64)
	folded, err2 = strconv.Atoi(fo)
	if !ok || !ok2 || err1 != nil || err2 != nil {
		return 0, 0, 0, fmt.Errorf("malformed users field %q", v)
	}
	for rest != "" {
		l, after, ok := strings.Cut(rest, ":")
		n, err := strconv.Atoi(l)
		if !ok || err != nil || n < 0 || n > len(after) {
			return 0, 0, 0, fmt.Errorf("malformed users field %q", v)
		}
		end := strings.IndexByte(after[n:], ';')
		if end < 0 {
			return 0, 0, 0, fmt.Errorf("malformed users field %q", v)
		}
		win(after[:n], after[n:n+end])
		wins++
		rest = after[n+end+1:]
	}
	if folded > wins {
		return 0, 0, 0, fmt.Errorf("malformed users field %q: %d folded of %d wins", v, folded, wins)
	}
	return held, folded, wins, nil
}

// unfolded returns the reservation ids whose "queued" records are not in :results yet.
func (f userField) unfolded() []string { return f.ids[f.folded:] }

// heldWin is a win read from a :users field: its request id and reservation id.
type heldWin struct{ req, resv string }

// heldRequestsOn lists the request ids of the wins not released in the key set on (an activity or
// a bucket). A user's field keeps every win, released ones too (release.lua only lowers held), so
// a user holding nothing is skipped, the one win of a user holding items is held, and the wins of
// a user with several are looked up in :released, one HMGET per step. The hash is scanned in steps
// of 512 so that a large sale does not block the server.
func (s *Store) heldRequestsOn(ctx context.Context, on string) ([]string, error) {
	var (
		ids    []string
		check  []heldWin           // this step's wins to look up in :released
		seen   = map[string]bool{} // users holding items listed so far: HSCAN may return a field twice
		cursor uint64
	)
	for {
		kv, next, err := s.client.HScan(ctx, s.key(on, "users"), cursor, "", 512).Result()
		if err != nil {
			return nil, err
		}
		check = check[:0]
		for i := 0; i+1 < len(kv); i += 2 {
			start := len(check)
			held, _, n, err := scanUserField(kv[i+1], func(req, resv string) { check = append(check, heldWin{req, resv}) })
			if err != nil {
				return nil, fmt.Errorf("user %q: %w", kv[i], err)
			}
			switch {
			case held <= 0 || seen[kv[i]]:
				check = check[:start]
				continue
			case n == 1: // its one win holds the items
				ids = append(ids, check[start].req)
				check = check[:start]
			}
			seen[kv[i]] = true
		}
		if ids, err = s.unreleased(ctx, on, ids, check); err != nil {
			return nil, err
		}
		if next == 0 {
			return ids, nil
		}
		cursor = next
	}
}

// unreleased appends to ids the request ids of the wins in check that on's :released lacks.
func (s *Store) unreleased(ctx context.Context, on string, ids []string, check []heldWin) ([]string, error) {
	if len(check) == 0 {
		return ids, nil
	}
	resvs := make([]string, len(check))
	for i, w := range check {
		resvs[i] = w.resv
	}
	gone, err := s.client.HMGet(ctx, s.key(on, "released"), resvs...).Result()
	if err != nil {
		return nil, fmt.Errorf("released: %w", err)
	}
	if len(gone) != len(check) {
		return nil, fmt.Errorf("released: malformed hmget reply: %d elements for %d fields", len(gone), len(check))
	}
	for i, w := range check {
		if gone[i] == nil {
			ids = append(ids, w.req)
		}
	}
	return ids, nil
}

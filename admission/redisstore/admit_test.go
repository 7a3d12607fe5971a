package redisstore

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisAdmitCommands pins the commands admit.lua runs per call, whatever the batch: one
// HMGET of :users for all the call's users (an HGET for a call of one request) and one HSET of
// every field it changes (a redis.call costs thousands of instructions, so the won path runs none
// per request or per win).
// It counts them in INFO commandstats of a private server, reset before each call.
func TestRedisAdmitCommands(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = raw.Close() })
	s, err := New(redis.NewClient(&redis.Options{Addr: srv.Addr}), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Define(ctx, redisTestActivity("cmds", 1<<40, 1), false); err != nil {
		t.Fatal(err)
	}
	sha, err := raw.ScriptLoad(ctx, luaAdmit).Result()
	if err != nil {
		t.Fatal(err)
	}
	keys := s.admitKeys("cmds")
	// call runs the script for the users with request id "r" and returns its answers and the
	// commands the server ran for it (name → calls), the script's own EVALSHA included.
	call := func(users ...string) ([]any, map[string]int64) {
		t.Helper()
		if err := raw.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		var args []any
		for _, u := range users {
			args = append(args, u, 1, "r")
		}
		res, err := raw.EvalSha(ctx, sha, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		info, err := raw.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		return res, commandCalls(t, info)
	}
	users := func(from, to int) []string {
		var u []string
		for i := from; i < to; i++ {
			u = append(u, fmt.Sprint("u", i))
		}
		return u
	}
	// outcomes are each answer's outcome and replayed flag, "1/0" for a new win.
	outcomes := func(res []any) string {
		var b strings.Builder
		for i := 0; i < len(res); i += 4 {
			fmt.Fprintf(&b, "%v/%v ", res[i], res[i+3])
		}
		return b.String()
	}
	want := func(n int, s string) string { return strings.Repeat(s+" ", n) }

	// The activity's first win converts :users to a hash table (an HSET and HDEL of a padding
	// field); later calls do not.
	if res, _ := call("first"); outcomes(res) != want(1, "1/0") {
		t.Fatalf("first win: %v", res)
	}
	for _, c := range []struct {
		name  string
		users []string
		won   string
		calls map[string]int64
	}{
		{"64 new users", users(0, 64), want(64, "1/0"),
			map[string]int64{"time": 1, "hmget": 2, "get": 1, "decrby": 1, "hincrby": 2, "xadd": 1, "hset": 1, "object|encoding": 1}},
		// Each replay reads its win's stream entry (its remaining), and writes its field again.
		{"32 replays and 32 new users", append(users(32, 64), users(64, 96)...), want(32, "1/1") + want(32, "1/0"),
			map[string]int64{"time": 1, "hmget": 2, "get": 1, "xrange": 32, "decrby": 1, "hincrby": 2, "xadd": 1, "hset": 1, "object|encoding": 1}},
		{"replays only", users(0, 3), want(3, "1/1"),
			map[string]int64{"time": 1, "hmget": 2, "get": 1, "xrange": 3, "hset": 1}},
		// One request: its field read with HGET (no tables for one field).
		{"one new user", []string{"u300"}, "1/0 ",
			map[string]int64{"time": 1, "hmget": 1, "hget": 1, "get": 1, "decrby": 1, "hincrby": 2, "xadd": 1, "hset": 1, "object|encoding": 1}},
		{"a new user twice, and a replay", []string{"u200", "u200", "u5"}, "1/0 1/1 1/1 ",
			map[string]int64{"time": 1, "hmget": 2, "get": 1, "xrange": 1, "decrby": 1, "hincrby": 2, "xadd": 1, "hset": 1, "object|encoding": 1}},
	} {
		res, got := call(c.users...)
		if o := outcomes(res); o != c.won {
			t.Errorf("%s: outcomes %s, want %s", c.name, o, c.won)
		}
		c.calls["evalsha"] = 1
		if !maps.Equal(got, c.calls) {
			t.Errorf("%s: the server ran %v, want %v", c.name, got, c.calls)
		}
	}
	if n := raw.HLen(ctx, keys[2]).Val(); n != 99 {
		t.Errorf(":users has %d fields, want 99", n)
	}
}

// commandCalls returns INFO commandstats as command → calls, without the test's own CONFIG
// RESETSTAT.
func commandCalls(t *testing.T, info string) map[string]int64 {
	t.Helper()
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd || name == "config|resetstat" {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(strings.TrimPrefix(v, "calls="), 10, 64)
		if err != nil {
			t.Fatalf("INFO commandstats %q: %v", line, err)
		}
		calls[name] = n
	}
	return calls
}

// TestRedisAdmitOOM checks the admission script's write order under maxmemory: a server over its
// limit (noeviction) refuses a script's write command only while the script has written nothing,
// so the call's first write (DECRBY for a call with a win, the HSET of the user's field for a
// replay) fails and the call leaves nothing behind: no stock taken, no stream entry, no counter,
// no user field. (A server under its limit when the call starts refuses none of its writes.)
func TestRedisAdmitOOM(t *testing.T) {
	srv := testsrv.StartRedis(t, testsrv.WithArgs("--maxmemory-policy", "noeviction"))
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	if _, err := s.Define(ctx, redisTestActivity("oom", 10, 1), true); err != nil {
		t.Fatal(err)
	}
	// admit runs one script call of the store's group admission for (user, request id) pairs,
	// qty 1, and returns the first error.
	admit := func(reqs ...string) error {
		var calls []*admitCall
		for i := 0; i+1 < len(reqs); i += 2 {
			calls = append(calls, &admitCall{req: admission.Request{Activity: "oom", User: reqs[i], Qty: 1, RequestID: reqs[i+1]}, done: make(chan struct{}, 1)})
		}
		s.runAdmitBatches(ctx, []admitBatch{{activity: "oom", calls: calls}})
		var err error
		for _, c := range calls {
			<-c.done
			if err == nil {
				err = c.answer.err
			}
		}
		return err
	}
	// One win before the limit: its field makes the second call below a replay.
	if err := admit("u0", "r0"); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		return fmt.Sprint(client.Get(ctx, s.key("oom", "stock")).Val(), client.XLen(ctx, s.key("oom", "orders")).Val(),
			client.HGetAll(ctx, s.key("oom", "users")).Val(), client.HMGet(ctx, s.key("oom", "meta"), "wins", "buyers").Val())
	}
	before := state()
	if err := client.Set(ctx, "filler", strings.Repeat("x", 4<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	for _, reqs := range [][]string{
		{"u1", "r1"},             // a win: DECRBY is the first write
		{"u0", "r0"},             // a replay: the rewrite of its field is the first write
		{"u2", "r2", "u0", "r0"}, // both in one call
	} {
		err := admit(reqs...)
		if err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("%v over maxmemory: err %v, want OOM", reqs, err)
		}
		if got := state(); got != before {
			t.Fatalf("%v over maxmemory wrote: %s, was %s", reqs, got, before)
		}
	}
	if err := client.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admit("u1", "r1"); err != nil {
		t.Fatalf("after the limit was lifted: %v", err)
	}
}

package redisstore

import (
	"context"
	_ "embed" // the prototype's scripts
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// The one-field-per-user layout of issue 15 (docs/admission.md, "A one-field-per-user layout"):
// a PROTOTYPE, measured and checked against lua/admit.lua here and used by no store.
var (
	//go:embed testdata/wonlayout/admit.lua
	protoAdmit string
	//go:embed testdata/wonlayout/admit_resv.lua
	protoAdmitResv string
	//go:embed testdata/wonlayout/release.lua
	protoRelease string
	//go:embed testdata/wonlayout/set_result.lua
	protoSetResult string
)

// protoAdmitKeys returns the prototype admit.lua's KEYS for activity; with resv, admit_resv.lua's.
func (s *Store) protoAdmitKeys(activity string, resv bool) []string {
	k := []string{
		s.key(activity, "meta"), s.key(activity, "stock"), s.key(activity, "users"), s.key(activity, "orders"),
	}
	if resv {
		k = append(k, s.key(activity, "resv"))
	}
	return k
}

// BenchmarkWonLayoutScript is BenchmarkRedisAdmitScript for the prototype's admit.lua (the same
// cases, calls and metrics); scripts/callgrind-admit.sh measures it with BENCH=WonLayoutScript.
func BenchmarkWonLayoutScript(b *testing.B) { benchProtoAdmit(b, protoAdmit, false) }

// BenchmarkWonLayoutResvScript is BenchmarkWonLayoutScript for admit_resv.lua (:resv kept).
func BenchmarkWonLayoutResvScript(b *testing.B) { benchProtoAdmit(b, protoAdmitResv, true) }

func benchProtoAdmit(b *testing.B, src string, resv bool) {
	s := redisScriptBenchStore(b)
	for _, path := range []struct {
		name  string
		stock int64
	}{{"won", 1 << 50}, {"sold_out", 0}} {
		for _, batch := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s_batch%d", path.name, batch), func(b *testing.B) {
				// Delete (in redisBenchScript) does not know the prototype's :users.
				if err := s.client.Del(context.Background(), s.key("script", "users")).Err(); err != nil {
					b.Fatal(err)
				}
				redisBenchScript(b, s, src, s.protoAdmitKeys("script", resv), path.stock, batch)
			})
		}
	}
}

// TestWonLayoutProtoEquivalence runs one random workload on two activities, one with today's
// scripts (lua/admit.lua, release.lua, set_result.lua) and one with the prototype's
// (testdata/wonlayout), and checks that every answer is the same and that what a poll, Holders,
// Remaining, a release and the order backend read back is the same, reservation ids mapped (the
// n-th new win of one is the n-th of the other). Admissions come in batches of 1 to 9 from a few
// users with a few request ids each (replays, also within a batch), quantities up to one above the
// limit, stock that runs out and comes back by releases, windows closed and opened again, result
// records for a user's reservations, and request and user ids with the prototype's separators.
func TestWonLayoutProtoEquivalence(t *testing.T) {
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	for _, resv := range []bool{false, true} {
		for seed := int64(1); seed <= 12; seed++ {
			t.Run(fmt.Sprintf("resv=%v/seed=%d", resv, seed), func(t *testing.T) {
				protoEquivalence(t, s, nil, seed, resv)
			})
		}
	}
}

// TestWonLayoutV2Equivalence is TestWonLayoutProtoEquivalence for the production layout-2
// scripts (lua/admit_v2.lua, release_v2.lua, set_result_v2.lua) on an activity a store with
// Options.Layout 2 defined, against layout 1's; it also compares what the stores read back
// through their own calls: GetResult and AppendResult (layout 2 folds the unfolded wins in Go),
// Holders, Remaining, and the snapshot's Queued and Buyers.
func TestWonLayoutV2Equivalence(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var stores [2]*Store
	for i, layout := range []int{1, 2} {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		s, err := New(client, Options{Layout: layout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		stores[i] = s
	}
	for seed := int64(1); seed <= 24; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			protoEquivalence(t, stores[0], stores[1], seed, false)
		})
	}
}

// protoRun is one side of the equivalence test: an activity and its scripts.
type protoRun struct {
	s                          *Store
	v2                         bool // the production layout-2 scripts, on an activity s defined
	act                        string
	admit, release, setResult  *redis.Script
	admitKeys, relKeys, srKeys []string
}

// protoEquivalence runs the workload on layout 1 and, when v2 is nil, the prototype's scripts,
// else the production layout-2 scripts on an activity v2 (Options.Layout 2) defines.
func protoEquivalence(t *testing.T, s, v2 *Store, seed int64, resv bool) {
	ctx := context.Background()
	rnd := rand.New(rand.NewSource(seed))
	limit := int64(1 + rnd.Intn(3))
	stock := int64(5 + rnd.Intn(20))
	a1, a2 := fmt.Sprintf("old-%v-%d", resv, seed), fmt.Sprintf("new-%v-%d", resv, seed)
	if v2 != nil {
		a1, a2 = fmt.Sprintf("v1-%d", seed), fmt.Sprintf("v2-%d", seed)
	}
	for i, a := range []string{a1, a2} {
		def := s
		if i == 1 && v2 != nil {
			def = v2
		}
		if _, err := def.Define(ctx, redisTestActivity(a, stock, limit), true); err != nil {
			t.Fatal(err)
		}
	}
	old := &protoRun{s: s, act: a1, admit: redis.NewScript(luaAdmit), release: redis.NewScript(luaRelease),
		setResult: redis.NewScript(luaSetResult), admitKeys: s.admitKeys(a1),
		relKeys: []string{s.key(a1, "meta"), s.key(a1, "stock"), s.key(a1, "buyers"), s.key(a1, "released"), s.key(a1, "resv")},
		srKeys:  []string{s.key(a1, "meta"), s.key(a1, "results")}}
	src := protoAdmit
	if resv {
		src = protoAdmitResv
	}
	nu := &protoRun{s: s, act: a2, admit: redis.NewScript(src), release: redis.NewScript(protoRelease),
		setResult: redis.NewScript(protoSetResult), admitKeys: s.protoAdmitKeys(a2, resv),
		relKeys: []string{s.key(a2, "meta"), s.key(a2, "stock"), s.key(a2, "users"), s.key(a2, "released"), s.key(a2, "orders")},
		srKeys:  []string{s.key(a2, "meta"), s.key(a2, "results"), s.key(a2, "users")}}
	if v2 != nil {
		nu.s, nu.v2 = v2, true
		nu.admit, nu.release, nu.setResult = v2.admit2, v2.release2, v2.setResult2
		nu.admitKeys = v2.admitKeysV2(a2)
	}

	users := []string{"u0", "u1", "u2", "u3", "u4", "5", "u 6;\n", "u7:1;"}
	rids := []string{"r0", "r1", "r2", "12:x;", "r;4\n", "1", strings.Repeat("q", admission.MaxRequestIDLen)}
	var (
		toOld   = map[string]string{} // prototype reservation id -> today's
		toNew   = map[string]string{}
		ofUser  = map[string][]string{} // user -> today's reservation ids
		allResv []string
		wins    int
	)
	for op := 0; op < 400; op++ {
		switch r := rnd.Intn(100); {
		case r < 60: // a batch of admissions
			var args []any
			for n := 1 + rnd.Intn(9); n > 0; n-- {
				args = append(args, users[rnd.Intn(len(users))], 1+rnd.Int63n(limit+1), rids[rnd.Intn(len(rids))])
			}
			o := old.call(t, old.admit, old.admitKeys, args...)
			n := nu.call(t, nu.admit, nu.admitKeys, args...)
			ov, nv := o.([]any), n.([]any)
			if len(ov) != len(nv) {
				t.Fatalf("op %d: %d answers, prototype %d", op, len(ov), len(nv))
			}
			for i := 0; i < len(ov); i += 4 {
				oid, nid := fmt.Sprint(ov[i+2]), fmt.Sprint(nv[i+2])
				if fmt.Sprint(ov[i], ov[i+1], ov[i+3]) != fmt.Sprint(nv[i], nv[i+1], nv[i+3]) || (oid == "") != (nid == "") {
					t.Fatalf("op %d request %v: answer %v, prototype %v", op, args[i/4*3:i/4*3+3], ov[i:i+4], nv[i:i+4])
				}
				if oid == "" {
					continue
				}
				if nv[i+3] == int64(0) { // a new win
					if _, dup := toOld[nid]; dup {
						t.Fatalf("op %d: prototype reservation %s handed out twice", op, nid)
					}
					toOld[nid], toNew[oid] = oid, nid
					u := fmt.Sprint(args[i/4*3])
					ofUser[u] = append(ofUser[u], oid)
					allResv = append(allResv, oid)
					wins++
				} else if toOld[nid] != oid {
					t.Fatalf("op %d: replay answered %s, prototype %s (maps to %s)", op, oid, nid, toOld[nid])
				}
			}
		case r < 75 && len(allResv) > 0: // a release, sometimes repeated, sometimes unknown
			id := allResv[rnd.Intn(len(allResv))]
			token := strconv.Itoa(rnd.Intn(2))
			oid, nid := id, toNew[id]
			if rnd.Intn(8) == 0 {
				oid, nid = "1-1", "1-1-1"
			}
			o := old.callErr(old.release, old.relKeys, oid, token, "restock-test", a1)
			n := nu.callErr(nu.release, nu.relKeys, nid, token, "restock-test", a2)
			if fmt.Sprint(o) != fmt.Sprint(n) {
				t.Fatalf("op %d: release %s: %v, prototype %v", op, oid, o, n)
			}
		case r < 92: // the order backend's result record
			u := users[rnd.Intn(len(users))]
			var oid string
			if ids := ofUser[u]; len(ids) > 0 && rnd.Intn(5) > 0 {
				oid = ids[rnd.Intn(len(ids))]
			}
			res := admission.Result{Code: []string{"pending_payment", "paid", "cancelled", "failed"}[rnd.Intn(4)],
				OrderID: "o" + strconv.Itoa(op), ReservationID: oid}
			old.call(t, old.setResult, old.srKeys, u, admission.AppendResultJSON(nil, res), oid, admission.MaxResultReservations)
			res.ReservationID = toNew[oid]
			nu.call(t, nu.setResult, nu.srKeys, u, admission.AppendResultJSON(nil, res), toNew[oid], admission.MaxResultReservations)
		default: // close the window (not started or ended) or open it again, on both
			now := time.Now().UnixMilli()
			start, end := now-60000, now+3600000
			switch rnd.Intn(3) {
			case 0:
				start = now + 3600000
			case 1:
				end = now - 1
			}
			for _, a := range []string{a1, a2} {
				if err := s.client.HSet(ctx, s.key(a, "meta"), "start_ms", start, "end_ms", end).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if op%20 == 19 {
			protoCompare(t, op, old, nu, users, toOld, resv)
		}
	}
	protoCompare(t, -1, old, nu, users, toOld, resv)
	if wins < 10 {
		t.Fatalf("only %d wins: the workload does not exercise the won path", wins)
	}
}

// redisTestActivity is an open activity.
func redisTestActivity(id string, stock, limit int64) admission.Activity {
	now := time.Now()
	return admission.Activity{ID: id, Stock: stock, Limit: limit, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute}
}

func (p *protoRun) call(t *testing.T, sc *redis.Script, keys []string, args ...any) any {
	t.Helper()
	v, err := sc.Run(context.Background(), p.s.client, keys, args...).Result()
	if err != nil {
		t.Fatalf("%s: %v", p.act, err)
	}
	return v
}

// callErr returns the reply, or the error's first word.
func (p *protoRun) callErr(sc *redis.Script, keys []string, args ...any) any {
	v, err := sc.Run(context.Background(), p.s.client, keys, args...).Result()
	if err != nil {
		return "error " + strings.Fields(err.Error())[0]
	}
	return v
}

// protoCompare checks that both activities read back the same: stock, holders, each user's poll
// answer and the wins queue; with resv (admit_resv.lua), :resv too.
func protoCompare(t *testing.T, op int, old, nu *protoRun, users []string, toOld map[string]string, resv bool) {
	t.Helper()
	ctx := context.Background()
	c := old.s.client
	mapIDs := func(s string) string {
		for n, o := range toOld {
			s = strings.ReplaceAll(s, `"`+n+`"`, `"`+o+`"`)
		}
		return s
	}
	if o, n := c.Get(ctx, old.s.key(old.act, "stock")).Val(), c.Get(ctx, nu.s.key(nu.act, "stock")).Val(); o != n {
		t.Fatalf("op %d: stock %s, prototype %s", op, o, n)
	}
	if o, n := fmt.Sprint(c.HGetAll(ctx, old.s.key(old.act, "buyers")).Val()), fmt.Sprint(protoHolders(t, nu)); o != n {
		t.Fatalf("op %d: holders %s, prototype %s", op, o, n)
	}
	for _, u := range users {
		o, n := protoPollOld(t, old, u), mapIDs(protoPollNew(t, nu, u))
		if o != n {
			t.Fatalf("op %d: user %q polls\n%s\nprototype\n%s", op, u, o, n)
		}
	}
	if o, n := protoWinsOld(t, old), mapIDs(protoWinsNew(t, nu)); o != n {
		t.Fatalf("op %d: wins queue\n%s\nprototype\n%s", op, o, n)
	}
	if nu.v2 {
		protoCompareStores(t, op, old, nu, users, mapIDs)
	}
	if resv {
		o := c.HGetAll(ctx, old.s.key(old.act, "resv")).Val()
		n := map[string]string{}
		for id, v := range c.HGetAll(ctx, nu.s.key(nu.act, "resv")).Val() {
			n[toOld[id]] = v
		}
		if fmt.Sprint(o) != fmt.Sprint(n) {
			t.Fatalf("op %d: resv %v, prototype %v", op, o, n)
		}
	}
}

// protoCompareStores compares what the two stores answer through their own calls (old on layout
// 1, nu on layout 2): each user's GetResult and AppendResult, Holders, Remaining and the
// snapshot's counters.
func protoCompareStores(t *testing.T, op int, old, nu *protoRun, users []string, mapIDs func(string) string) {
	t.Helper()
	ctx := context.Background()
	for _, u := range users {
		or, oerr := old.s.GetResult(ctx, old.act, u)
		nr, nerr := nu.s.GetResult(ctx, nu.act, u)
		o, n := fmt.Sprint(string(admission.AppendResultJSON(nil, or)), oerr), mapIDs(fmt.Sprint(string(admission.AppendResultJSON(nil, nr)), nerr))
		if errors.Is(oerr, admission.ErrNotFound) && errors.Is(nerr, admission.ErrNotFound) {
			o, n = "not found", "not found"
		}
		if o != n {
			t.Fatalf("op %d: user %q GetResult\n%s\nlayout 2\n%s", op, u, o, n)
		}
		ob, oc, oerr := old.s.AppendResult(ctx, nil, old.act, u)
		nb, nc, nerr := nu.s.AppendResult(ctx, nil, nu.act, u)
		o, n = fmt.Sprint(string(ob), oc, oerr != nil), mapIDs(fmt.Sprint(string(nb), nc, nerr != nil))
		if o != n || (oerr != nil && !errors.Is(nerr, admission.ErrNotFound)) {
			t.Fatalf("op %d: user %q AppendResult %s (%v), layout 2 %s (%v)", op, u, o, oerr, n, nerr)
		}
	}
	oh, err1 := old.s.Holders(ctx, old.act)
	nh, err2 := nu.s.Holders(ctx, nu.act)
	slices.Sort(oh)
	slices.Sort(nh)
	if err1 != nil || err2 != nil || fmt.Sprint(oh) != fmt.Sprint(nh) {
		t.Fatalf("op %d: holders %q %v, layout 2 %q %v", op, oh, err1, nh, err2)
	}
	os, err1 := old.s.Activity(ctx, old.act)
	ns, err2 := nu.s.Activity(ctx, nu.act)
	if err1 != nil || err2 != nil || os.Remaining != ns.Remaining || os.Sold != ns.Sold || os.Buyers != ns.Buyers ||
		os.Queued != ns.Queued || os.Dead != ns.Dead {
		t.Fatalf("op %d: snapshot %+v %v, layout 2 %+v %v", op, os, err1, ns, err2)
	}
}

// protoPollOld is what GetResult reads today: the latest record and, with a list, each record.
func protoPollOld(t *testing.T, p *protoRun, user string) string {
	v := p.s.client.HMGet(context.Background(), p.s.key(p.act, "results"), user, user+"\x00").Val()
	top, _ := v[0].(string)
	list, _ := v[1].(string)
	out := "top " + top
	if list != "" {
		for _, id := range strings.Fields(list) {
			r := p.s.client.HGet(context.Background(), p.s.key(p.act, "results"), user+"\x00"+id).Val()
			out += "\n" + strconv.Quote(id) + " " + r
		}
	}
	return out
}

// protoUserField parses the prototype's :users field: held, folded, and the (request id,
// reservation id) of each win, oldest first.
func protoUserField(t *testing.T, v string) (held, folded int64, rids, ids []string) {
	t.Helper()
	nl := strings.IndexByte(v, '\n')
	h, f, ok := strings.Cut(v[:nl], " ")
	held, err1 := strconv.ParseInt(h, 10, 64)
	folded, err2 := strconv.ParseInt(f, 10, 64)
	if nl < 0 || !ok || err1 != nil || err2 != nil {
		t.Fatalf("malformed users field %q", v)
	}
	for rest := v[nl+1:]; rest != ""; {
		l, after, _ := strings.Cut(rest, ":")
		n, err := strconv.Atoi(l)
		end := strings.IndexByte(after[n:], ';')
		if err != nil || end < 0 {
			t.Fatalf("malformed users field %q", v)
		}
		rids, ids = append(rids, after[:n]), append(ids, after[n:n+end])
		rest = after[n+end+1:]
	}
	return held, folded, rids, ids
}

// protoPollNew is what a poll of the prototype's layout would read: :results as set_result.lua
// left it, then the "queued" record of each win not folded yet, as lua/admit.lua's record_win
// would have written it at the win.
func protoPollNew(t *testing.T, p *protoRun, user string) string {
	ctx := context.Background()
	v := p.s.client.HMGet(ctx, p.s.key(p.act, "results"), user, user+"\x00").Val()
	top, _ := v[0].(string)
	listS, _ := v[1].(string)
	var list []string
	recs := map[string]string{}
	hasList := listS != ""
	if hasList {
		list = strings.Fields(listS)
		for _, id := range list {
			recs[id] = p.s.client.HGet(ctx, p.s.key(p.act, "results"), user+"\x00"+id).Val()
		}
	}
	if f, err := p.s.client.HGet(ctx, p.s.key(p.act, "users"), user).Result(); err == nil {
		_, folded, _, ids := protoUserField(t, f)
		for _, id := range ids[folded:] {
			rec := `{"code":"queued","reservation_id":"` + id + `"}`
			if !hasList && top != "" {
				var r struct {
					ReservationID any `json:"reservation_id"`
				}
				if json.Unmarshal([]byte(top), &r) == nil {
					if s, ok := r.ReservationID.(string); ok && s != "" {
						recs[s], list, hasList = top, []string{s}, true
					}
				}
			}
			if hasList {
				list = append(list, id)
				for len(list) > admission.MaxResultReservations {
					delete(recs, list[0])
					list = list[1:]
				}
				recs[id] = rec
			}
			top = rec
		}
	}
	out := "top " + top
	for _, id := range list {
		out += "\n" + strconv.Quote(id) + " " + recs[id]
	}
	return out
}

// protoHolders is Holders of the prototype's layout: users whose field holds items.
func protoHolders(t *testing.T, p *protoRun) map[string]string {
	all := p.s.client.HGetAll(context.Background(), p.s.key(p.act, "users")).Val()
	out := map[string]string{}
	for u, v := range all {
		if held, _, _, _ := protoUserField(t, v); held > 0 {
			out[u] = strconv.FormatInt(held, 10)
		}
	}
	return out
}

// protoWinsOld lists the wins queue as the order backend reads it: id, user, qty, request id.
func protoWinsOld(t *testing.T, p *protoRun) string {
	var b strings.Builder
	for _, m := range p.s.client.XRange(context.Background(), p.s.key(p.act, "orders"), "-", "+").Val() {
		fmt.Fprintf(&b, "%q %q %s %q\n", m.ID, m.Values["user"], m.Values["qty"], m.Values["req"])
	}
	return b.String()
}

// protoWinsNew splits the prototype's entries into wins: after at and left, a pair per win.
func protoWinsNew(t *testing.T, p *protoRun) string {
	var b strings.Builder
	msgs, err := p.s.client.Do(context.Background(), "xrange", p.s.key(p.act, "orders"), "-", "+").Slice()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		e := m.([]any)
		f := e[1].([]any)
		if len(f) < 6 || f[0] != "at" || f[2] != "left" || len(f)%2 != 0 {
			t.Fatalf("malformed entry %v", e)
		}
		for k := 1; 4+2*k <= len(f); k++ {
			qty, req, _ := strings.Cut(f[3+2*k].(string), " ")
			fmt.Fprintf(&b, "%q %q %s %q\n", fmt.Sprintf("%s-%d", e[0], k), f[2+2*k], qty, req)
		}
	}
	return b.String()
}

// TestWonLayoutProtoOOM checks the prototype's write order under maxmemory: a server over its
// limit (noeviction) refuses a script's write command only while the script has written nothing,
// so the call's first write, DECRBY, fails and the call leaves nothing behind: no stock taken, no
// stream entry, no user field. (A server under its limit when the call starts refuses none of its
// writes.)
func TestWonLayoutProtoOOM(t *testing.T) {
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
	admit := redis.NewScript(protoAdmit)
	keys := s.protoAdmitKeys("oom", false)
	// One win before the limit: its field makes the second call below a replay.
	if err := admit.Run(ctx, client, keys, "u0", 1, "r0").Err(); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		return fmt.Sprint(client.Get(ctx, s.key("oom", "stock")).Val(), client.XLen(ctx, s.key("oom", "orders")).Val(),
			client.HGetAll(ctx, s.key("oom", "users")).Val())
	}
	before := state()
	if err := client.Set(ctx, "filler", strings.Repeat("x", 4<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]any{
		{"u1", 1, "r1"},                // a win: DECRBY is the first write
		{"u0", 1, "r0"},                // a replay: the rewrite of its field is the first write
		{"u2", 1, "r2", "u0", 1, "r0"}, // both in one call
	} {
		err := admit.Run(ctx, client, keys, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "OOM") {
			t.Fatalf("%v over maxmemory: err %v, want OOM", args, err)
		}
		if got := state(); got != before {
			t.Fatalf("%v over maxmemory wrote: %s, was %s", args, got, before)
		}
	}
	if err := client.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admit.Run(ctx, client, keys, "u1", 1, "r1").Err(); err != nil {
		t.Fatalf("after the limit was lifted: %v", err)
	}
}

package localstore

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/proc"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
)

// The helper process: tests re-execute their own binary with SECKILL_LOCAL_HELPER set, so that
// the store runs in a process they can SIGKILL.
const (
	helperEnv     = "SECKILL_LOCAL_HELPER"
	helperDirEnv  = "SECKILL_LOCAL_DIR"
	helperSyncEnv = "SECKILL_LOCAL_FSYNC"
)

// TestLocalHelperProcess is the child's entry point; it does nothing in a normal run.
func TestLocalHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for the local store's crash tests")
	}
	dir := os.Getenv(helperDirEnv)
	var err error
	switch mode {
	case "scenario":
		err = helperScenario(dir)
	case "rush":
		err = helperRush(dir, os.Getenv(helperSyncEnv) == "1")
	case "ringstall":
		err = helperRingStall(dir)
	case "line":
		err = helperLine(dir, os.Getenv(helperSyncEnv) == "1")
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	fmt.Printf("E %v\n", err)
	os.Exit(3)
}

// startHelper starts the child in mode on dir and returns it with its stdout lines, which arrive
// on the channel until the child ends. The child is killed when the test ends.
func startHelper(t *testing.T, mode, dir string, env ...string) (*proc.Proc, <-chan string) {
	t.Helper()
	return testsrv.StartChild(t, "TestLocalHelperProcess", append([]string{helperEnv + "=" + mode, helperDirEnv + "=" + dir}, env...)...)
}

// kill SIGKILLs the child and waits for it; a child that exited before fails the test.
func kill(t *testing.T, p *proc.Proc) { testsrv.KillChild(t, p) }

// waitLine returns the first line starting with prefix, failing on an error line or a timeout.
func waitLine(t *testing.T, lines <-chan string, prefix string, collect *[]string) string {
	t.Helper()
	return testsrv.WaitLine(t, lines, prefix, collect)
}

func openLocal(t testing.TB, dir string, clock *fakeClock) *Store {
	t.Helper()
	opts := Options{}
	if clock != nil {
		opts.Now = clock.Now
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return s
}

// localDump is the whole state of a Memory, with times as integers, comparable as JSON.
type localDump map[string]actDump

type actDump struct {
	ID, Salt                            string
	Stock, Limit, StartMS, EndMS, PayMS int64
	Left                                int64
	Buyers                              map[string]int64
	Answers                             map[string]admission.Decision
	Released                            []string
	Results                             map[string]admission.Result
	Resvs                               map[string][]admission.Result
	Entries                             []entryDump
	LastMS                              int64
	Seq                                 uint64
	Groups                              map[string]groupDump
	Dead                                []entryDump
	// The waiting room's line, left out when empty (the dumps of earlier versions have none).
	Line      map[string]placeDump `json:",omitempty"`
	LineDrawn bool                 `json:",omitempty"`
	LineLate  []float64            `json:",omitempty"`
	LineNext  float64              `json:",omitempty"`
	// The line's terms, left out before its first join (and in the dumps of version 4 and before).
	LineInterval float64 `json:",omitempty"`
	LineSession  int64   `json:",omitempty"`
}

type placeDump struct {
	Early        bool
	Draw, Offset float64
	Rank         int64
}

type entryDump struct {
	ID, User, RequestID, Reason string
	Qty, AtMS, Deliveries       int64
}

type groupDump struct {
	Next    int
	Pending map[int]pendDump
}

type pendDump struct {
	Consumer   string
	Deliveries int64
	AtNS       int64
}

func dumpMemory(m *Memory) localDump {
	out := localDump{}
	for id, a := range *m.acts.Load() {
		a.mu.Lock()
		d := actDump{
			ID: id, Salt: a.def.Salt, Stock: a.def.Stock, Limit: a.def.Limit,
			StartMS: a.def.Start.UnixMilli(), EndMS: a.def.End.UnixMilli(), PayMS: a.def.PayWithin.Milliseconds(),
			Left: a.stock, Buyers: a.buyersView(), Answers: a.answersView(), Results: a.resultsView(), Resvs: a.resvsView(),
			LastMS: a.lastMS, Seq: a.seq, Groups: map[string]groupDump{},
		}
		for r := range a.released {
			d.Released = append(d.Released, r)
		}
		slices.Sort(d.Released)
		for _, e := range a.entries.all() {
			d.Entries = append(d.Entries, entryDump{ID: e.id, User: e.user, RequestID: e.requestID, Qty: e.qty, AtMS: e.atMS})
		}
		for name, g := range a.groups {
			gd := groupDump{Next: g.next, Pending: map[int]pendDump{}}
			for i, p := range g.pending {
				gd.Pending[i] = pendDump{Consumer: p.consumer, Deliveries: p.deliveries, AtNS: p.at.UnixNano()}
			}
			d.Groups[name] = gd
		}
		for _, w := range a.dead {
			d.Dead = append(d.Dead, entryDump{ID: w.ID, User: w.User, RequestID: w.RequestID, Reason: w.Reason, Qty: w.Qty, AtMS: w.At.UnixMilli(), Deliveries: w.Deliveries})
		}
		l := &a.line
		l.mu.Lock()
		for u, p := range l.places {
			if d.Line == nil {
				d.Line = map[string]placeDump{}
			}
			d.Line[u] = placeDump{Early: p.early, Draw: p.draw, Offset: p.offset, Rank: p.rank}
		}
		d.LineDrawn, d.LineLate, d.LineNext = l.drawn, l.late, l.tat
		d.LineInterval, d.LineSession = l.interval, l.session
		l.mu.Unlock()
		a.mu.Unlock()
		out[id] = d
	}
	return out
}

func dumpJSON(t testing.TB, m *Memory) string {
	t.Helper()
	b, err := json.Marshal(dumpMemory(m))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// scenario puts every kind of state into s: activities created, redefined, deleted and created
// again; wins, a refusal, a release; results; consumer groups with deliveries, acks, a claim and a
// dead letter.
func scenario(s admission.Store, clock *fakeClock) error {
	ctx := context.Background()
	t0 := clock.Now()
	def := func(id string, start time.Duration, stock, limit int64, force bool) error {
		_, err := s.Define(ctx, admission.Activity{ID: id, Stock: stock, Limit: limit, Start: t0.Add(start), End: t0.Add(time.Hour), PayWithin: 15 * time.Minute}, force)
		return err
	}
	win := func(act, user string, qty int64, req string) (string, error) {
		d, err := s.Admit(ctx, admission.Request{Activity: act, User: user, Qty: qty, RequestID: req})
		if err != nil {
			return "", err
		}
		clock.Add(time.Millisecond)
		if d.Outcome != admission.Won {
			return "", fmt.Errorf("admit %s/%s/%s: %v", act, user, req, d.Outcome)
		}
		return d.ReservationID, nil
	}
	steps := []func() error{
		func() error { return def("a", -time.Minute, 10, 2, false) },
		func() error { return def("b", time.Minute, 5, 1, false) },
		func() error { return def("c", time.Minute, 7, 1, false) },
		func() error { return s.Delete(ctx, "c", false) },
		func() error { return def("c", time.Minute, 3, 1, false) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	var ids []string
	for _, w := range []struct {
		user string
		qty  int64
	}{{"u1", 2}, {"u2", 1}, {"u3", 1}, {"u4", 1}, {"u5", 1}} {
		id, err := win("a", w.user, w.qty, "r1")
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u2", Qty: 2, RequestID: "r2"}); err != nil || d.Outcome != admission.LimitReached {
		return fmt.Errorf("limit: %+v: %w", d, err)
	}
	if ok, err := s.Release(ctx, "a", ids[2]); err != nil || !ok {
		return fmt.Errorf("release: %v: %w", ok, err)
	}
	if err := def("a", -time.Minute, 12, 2, true); err != nil {
		return err
	}
	if err := s.SetResult(ctx, "a", "u1", admission.Result{Code: "pending_payment", ReservationID: ids[0], OrderID: "o-1", PayBeforeMS: 1_800_000_900_000}); err != nil {
		return err
	}
	for _, g := range []string{"orders", "audit"} {
		if err := s.EnsureGroup(ctx, "a", g); err != nil {
			return err
		}
	}
	if ws, err := s.ReadGroup(ctx, "a", "orders", "c1", 2, 0, false); err != nil || len(ws) != 2 {
		return fmt.Errorf("read: %v: %w", ws, err)
	}
	if err := s.Ack(ctx, "a", "orders", ids[0]); err != nil {
		return err
	}
	clock.Add(time.Second)
	if ws, err := s.ReadGroup(ctx, "a", "orders", "c1", 10, 0, true); err != nil || len(ws) != 1 {
		return fmt.Errorf("read pending: %v: %w", ws, err)
	}
	clock.Add(time.Minute)
	if ws, err := s.Claim(ctx, "a", "orders", "c2", 30*time.Second, 10); err != nil || len(ws) != 1 {
		return fmt.Errorf("claim: %v: %w", ws, err)
	}
	ws, err := s.ReadGroup(ctx, "a", "orders", "c2", 1, 0, false)
	if err != nil || len(ws) != 1 {
		return fmt.Errorf("read c2: %v: %w", ws, err)
	}
	if err := s.DeadLetter(ctx, "a", "orders", ws[0], "poison"); err != nil {
		return err
	}
	if _, err := win("a", "u6", 1, "r1"); err != nil {
		return err
	}
	// A result stored before the user's win is replaced by the win's; one without a win stays.
	if err := s.SetResult(ctx, "a", "u7", admission.Result{Code: "failed"}); err != nil {
		return err
	}
	if err := s.SetResult(ctx, "a", "u8", admission.Result{Code: "cancelled", ReservationID: ids[1]}); err != nil {
		return err
	}
	if _, err := win("a", "u7", 1, "r1"); err != nil {
		return err
	}
	// Several reservations of one user (activity d): a second win starts the per-reservation
	// records and a later record of the first reservation updates them (v1); a result row
	// followed by a win of the same user is folded again at load (v2).
	if err := def("d", -time.Minute, 10, 3, false); err != nil {
		return err
	}
	v1, err := win("d", "v1", 1, "r1")
	if err != nil {
		return err
	}
	if _, err := win("d", "v1", 1, "r2"); err != nil {
		return err
	}
	if err := s.SetResult(ctx, "d", "v1", admission.Result{Code: "pending_payment", ReservationID: v1, OrderID: "o-v1", PayBeforeMS: 1_800_000_900_000}); err != nil {
		return err
	}
	v2, err := win("d", "v2", 1, "r1")
	if err != nil {
		return err
	}
	if err := s.SetResult(ctx, "d", "v2", admission.Result{Code: "paid", ReservationID: v2, OrderID: "o-v2"}); err != nil {
		return err
	}
	if _, err := win("d", "v2", 1, "r2"); err != nil {
		return err
	}
	if l, ok := s.(waitroom.Line); ok {
		return lineScenario(s, l, clock)
	}
	return nil
}

func helperScenario(dir string) error {
	clock := newFakeClock()
	s, err := Open(dir, Options{Now: clock.Now})
	if err != nil {
		return err
	}
	if err := scenario(s, clock); err != nil {
		return err
	}
	b, err := json.Marshal(dumpMemory(s.cur.Load().mem))
	if err != nil {
		return err
	}
	fmt.Printf("DUMP %s\n", b)
	select {} // wait for the SIGKILL
}

// checkAfterReopen checks what a reopened scenario store does next: replays, ids that keep
// growing, a release that stays done, redelivery from the PEL.
func checkAfterReopen(t *testing.T, s *Store, clock *fakeClock) {
	t.Helper()
	ctx := context.Background()
	first := s.cur.Load().mem.answersFor(t, "a", "u1", "r1")
	d, err := s.Admit(ctx, admission.Request{Activity: "a", User: "u1", Qty: 2, RequestID: "r1"})
	if err != nil || !d.Replayed || d.ReservationID != first.ReservationID || d.Remaining != first.Remaining {
		t.Errorf("replay after reopen = %+v, %v; first %+v", d, err, first)
	}
	if d := mustAdmit(t, s, "a", "u2", 1, "r2"); d.Outcome != admission.Won || d.Remaining != 12-8 {
		t.Errorf("u2's second item = %+v, want won with 4 left", d)
	} else {
		ms, _ := parseID(t, d.ReservationID)
		if ms < clock.Now().UnixMilli() {
			t.Errorf("new id %s is not after the reopen's clock", d.ReservationID)
		}
	}
	if ok, err := s.Release(ctx, "a", first.ReservationID); err != nil || !ok {
		t.Errorf("release u1 = %v, %v", ok, err)
	}
	if ok, err := s.Release(ctx, "a", first.ReservationID); err != nil || ok {
		t.Errorf("second release u1 = %v, %v", ok, err)
	}
	ws, err := s.ReadGroup(ctx, "a", "orders", "c2", 10, 0, true)
	if err != nil || len(ws) != 1 || ws[0].User != "u2" || ws[0].Deliveries != 4 {
		t.Errorf("c2's pending after reopen = %+v, %v; want u2's win, fourth delivery", ws, err)
	}
	if r, err := s.GetResult(ctx, "a", "u1"); err != nil || r.OrderID != "o-1" {
		t.Errorf("u1's result = %+v, %v", r, err)
	}
	if r, err := s.GetResult(ctx, "a", "u7"); err != nil || r.Code != "queued" {
		t.Errorf("u7's result = %+v, %v; want queued (the win came after the stored result)", r, err)
	}
	if r, err := s.GetResult(ctx, "a", "u8"); err != nil || r.Code != "cancelled" {
		t.Errorf("u8's result = %+v, %v; want cancelled", r, err)
	}
	if r, err := s.GetResult(ctx, "d", "v1"); err != nil || r.Code != "queued" || len(r.Reservations) != 2 || r.Reservations[0].OrderID != "o-v1" {
		t.Errorf("v1's result = %+v, %v; want the second win queued, the first's order in its records", r, err)
	}
	if r, err := s.GetResult(ctx, "d", "v2"); err != nil || r.Code != "queued" || len(r.Reservations) != 2 || r.Reservations[0].Code != "paid" {
		t.Errorf("v2's result = %+v, %v; want the later win queued, the paid one in its records", r, err)
	}
	if dl, err := s.DeadLetters(ctx, "a", 10); err != nil || len(dl) != 1 || dl[0].Reason != "poison" {
		t.Errorf("dead letters = %+v, %v", dl, err)
	}
	if snap, err := s.Activity(ctx, "c"); err != nil || snap.Stock != 3 {
		t.Errorf("c after delete and redefinition = %+v, %v", snap, err)
	}
}

func (m *Memory) answersFor(t *testing.T, act, user, req string) admission.Decision {
	t.Helper()
	a, err := m.lock(act)
	if err != nil {
		t.Fatal(err)
	}
	defer a.mu.Unlock()
	d, ok := a.answerFor(user, req)
	if !ok {
		t.Fatalf("no answer for %s/%s/%s", act, user, req)
	}
	return d
}

func TestLocalReopenAfterClose(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	s := openLocal(t, dir, clock)
	if err := scenario(s, clock); err != nil {
		t.Fatal(err)
	}
	s = reopenSame(t, s, dir, clock)
	checkAfterReopen(t, s, clock)
}

// reopenSame closes s, opens dir again and fails the test unless the store holds the very state
// s had; the reopened store is closed at the test's end.
func reopenSame(t *testing.T, s *Store, dir string, clock *fakeClock) *Store {
	t.Helper()
	want := dumpJSON(t, s.cur.Load().mem)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, clock)
	t.Cleanup(func() { _ = s.Close() })
	if got := dumpJSON(t, s.cur.Load().mem); got != want {
		t.Fatalf("state after reopen:\n%s\nbefore close:\n%s", got, want)
	}
	return s
}

func TestLocalReopenAfterKill(t *testing.T) {
	dir := t.TempDir()
	p, lines := startHelper(t, "scenario", dir)
	line := waitLine(t, lines, "DUMP ", nil)
	kill(t, p)
	clock := newFakeClock()
	clock.Add(2 * time.Minute)
	s := openLocal(t, dir, clock)
	defer s.Close()
	if got, want := dumpJSON(t, s.cur.Load().mem), strings.TrimPrefix(line, "DUMP "); got != want {
		t.Fatalf("state after SIGKILL and reopen:\n%s\nthe child's before the kill:\n%s", got, want)
	}
	checkAfterReopen(t, s, clock)
}

// TestLocalLowerLimitReopens lowers the per-user limit, forced, below what a buyer holds: the
// buyer keeps the items, further buys are refused, and the folder opens again. The load once
// took such a buyer for damage and refused the sale for good (found in review).
func TestLocalLowerLimitReopens(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	s := openLocal(t, dir, clock)
	a := openAt(clock.Now(), "a", 10, 2)
	mustDefine(t, s, a)
	if d := mustAdmit(t, s, "a", "u", 2, "r1"); d.Outcome != admission.Won {
		t.Fatalf("admit = %+v", d)
	}
	a.Limit = 1
	if _, err := s.Define(context.Background(), a, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openLocal(t, dir, clock)
	defer s.Close()
	if n := mustRemaining(t, s, "a"); n != 8 {
		t.Errorf("remaining %d, want 8", n)
	}
	if d := mustAdmit(t, s, "a", "u", 1, "r2"); d.Outcome != admission.LimitReached {
		t.Errorf("a further buy of the holder = %+v; want LimitReached", d)
	}
	if d := mustAdmit(t, s, "a", "v", 1, "r1"); d.Outcome != admission.Won {
		t.Errorf("another buyer = %+v; want Won", d)
	}
}

package localstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// The crash test's sale: more buyers than items, two items each, and most orders unpaid (their
// items are released and sold again), so the sale keeps moving round after round.
const (
	rushActivity = "crash"
	rushStock    = 400
	rushLimit    = 2
	rushUsers    = 1200
	rushKeys     = 20 // request ids per user: a few repeat, most are new
	rushBuyers   = 32 // admitting goroutines in the child
)

func rushDefinition() admission.Activity {
	return admission.Activity{
		ID: rushActivity, Stock: rushStock, Limit: rushLimit,
		Start: time.UnixMilli(1_700_000_000_000), End: time.UnixMilli(4_000_000_000_000), PayWithin: 15 * time.Minute,
	}
}

// helperRush admits from many goroutines and consumes the wins queue until it is killed, printing
// every answer after it was returned: W user key reservation remaining (a win), N user key outcome (a
// refusal), R reservation (released by this call), A id (acknowledged), D id (dead-lettered).
func helperRush(dir string, fsyncAlways bool) error {
	// Checkpoints every few milliseconds, so that kills land in them too.
	s, err := Open(dir, Options{FsyncAlways: fsyncAlways, checkpointEvery: time.Duration(5+rand.IntN(30)) * time.Millisecond})
	if err != nil {
		return err
	}
	ctx := context.Background()
	if _, err := s.Define(ctx, rushDefinition(), false); err != nil {
		return err
	}
	if err := s.EnsureGroup(ctx, rushActivity, "orders"); err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Printf(format+"\n", args...) // one write per line: a kill never tears a line
		outMu.Unlock()
	}
	fail := func(err error) {
		say("E %v", err)
		os.Exit(3)
	}
	say("READY")
	go func() {
		pending := true // first the entries this consumer held when the last child was killed
		for {
			ws, err := s.ReadGroup(ctx, rushActivity, "orders", "c1", 32, 20*time.Millisecond, pending)
			if err != nil {
				fail(err)
			}
			if pending && len(ws) == 0 {
				pending = false
				continue
			}
			var ids []string
			for _, w := range ws {
				if rand.IntN(30) == 0 {
					if err := s.DeadLetter(ctx, rushActivity, "orders", w, "test"); err != nil {
						fail(err)
					}
					say("D %s", w.ID)
					continue
				}
				ids = append(ids, w.ID)
			}
			if len(ids) == 0 {
				continue
			}
			if err := s.Ack(ctx, rushActivity, "orders", ids...); err != nil {
				fail(err)
			}
			for _, id := range ids {
				say("A %s", id)
				if rand.IntN(10) != 0 { // an unpaid order timed out: its item goes back on sale
					ok, err := s.Release(ctx, rushActivity, id)
					if err != nil {
						fail(err)
					}
					if ok {
						say("R %s", id)
					}
				}
			}
		}
	}()
	for range rushBuyers {
		go func() {
			for {
				user := "u" + strconv.Itoa(rand.IntN(rushUsers))
				key := "k" + strconv.Itoa(rand.IntN(rushKeys))
				d, err := s.Admit(ctx, admission.Request{Activity: rushActivity, User: user, Qty: 1, RequestID: key})
				if err != nil {
					fail(err)
				}
				if d.Outcome != admission.Won {
					say("N %s %s %s", user, key, d.Outcome)
					continue
				}
				say("W %s %s %s %d", user, key, d.ReservationID, d.Remaining)
				if !d.Replayed && rand.IntN(20) == 0 {
					ok, err := s.Release(ctx, rushActivity, d.ReservationID)
					if err != nil {
						fail(err)
					}
					if ok {
						say("R %s", d.ReservationID)
					}
				}
			}
		}()
	}
	select {}
}

// rushLog is everything the children said, over every round.
type rushLog struct {
	wins     map[reqKey]string // user and key → reservation and stock left, as answered
	released map[string]bool
	acked    map[string]bool
	dead     map[string]bool
	limited  map[string]bool // users answered limit_reached
	soldOut  bool
}

func (l *rushLog) add(t *testing.T, line string) {
	t.Helper()
	f := strings.Fields(line)
	switch {
	case len(f) == 5 && f[0] == "W":
		k, answer := reqKey{f[1], f[2]}, f[3]+" "+f[4]
		if old, ok := l.wins[k]; ok && old != answer {
			t.Errorf("request %s/%s won %s, earlier %s", f[1], f[2], answer, old)
		}
		l.wins[k] = answer
	case len(f) == 4 && f[0] == "N":
		switch f[3] {
		case "limit_reached":
			l.limited[f[1]] = true
		case "sold_out":
			l.soldOut = true
		default:
			t.Errorf("refusal %q", line)
		}
	case len(f) == 2 && f[0] == "R":
		l.released[f[1]] = true
	case len(f) == 2 && f[0] == "A":
		l.acked[f[1]] = true
	case len(f) == 2 && f[0] == "D":
		l.dead[f[1]] = true
	case line == "READY":
	default:
		t.Errorf("helper said %q", line)
	}
}

// TestLocalCrash SIGKILLs a child that admits from many goroutines, at random moments, and checks
// after each kill that the reopened store has every answer the child gave, and nothing beyond the
// stock or the limit. Half the rounds run with FsyncAlways, the first among them; some append
// garbage to the WAL after the kill, a torn tail of a commit nobody was answered for.
func TestLocalCrash(t *testing.T) {
	rounds := 8
	if os.Getenv("SECKILL_CHAOS") == "full" {
		rounds = 40
	}
	dir := t.TempDir()
	log := &rushLog{wins: map[reqKey]string{}, released: map[string]bool{}, acked: map[string]bool{}, dead: map[string]bool{}, limited: map[string]bool{}}
	for round := range rounds {
		// Two rounds with FsyncAlways, two without, and so on: a new folder that never had a ring,
		// and every change of mode after a kill (always to always, to ring, ring to ring, to always).
		fsync := "0"
		if round%4 < 2 {
			fsync = "1"
		}
		p, lines := startHelper(t, "rush", dir, helperSyncEnv+"="+fsync)
		var said []string
		waitLine(t, lines, "READY", &said)
		// Read on while the child runs, so it never blocks on a full pipe with answers unprinted.
		drained := make(chan []string)
		go func() {
			var rest []string
			for l := range lines {
				rest = append(rest, l)
			}
			drained <- rest
		}()
		time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		kill(t, p)
		said = append(said, <-drained...)
		for _, l := range said {
			log.add(t, l)
		}
		if round%3 == 2 {
			tearWAL(t, dir)
		}
		s := openLocal(t, dir, nil)
		checkRush(t, s, log, round, len(said))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if t.Failed() {
			return
		}
	}
}

// tearWAL appends half a frame of garbage to the WAL, as a write cut short by the kill would.
func tearWAL(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, localDBName+"-wal"), os.O_WRONLY|os.O_APPEND, 0)
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, 2000)
	for i := range junk {
		junk[i] = byte(rand.IntN(256))
	}
	_, err = f.Write(junk)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

func checkRush(t *testing.T, s *Store, log *rushLog, round, said int) {
	t.Helper()
	a, err := s.cur.Load().mem.lock(rushActivity)
	if err != nil {
		t.Fatalf("round %d: %v", round, err)
	}
	held := map[string]int64{}
	entries := map[reqKey]int{}
	var sold int64
	for _, e := range a.entries.all() {
		entries[reqKey{e.user, e.requestID}]++
		if _, ok := a.released[e.id]; !ok {
			held[e.user] += e.qty
			sold += e.qty
		}
	}
	perUser := map[string]int{}
	for _, e := range a.entries.all() {
		perUser[e.user]++
	}
	if a.stock != rushStock-sold || a.stock < 0 {
		t.Errorf("round %d: %d left, want %d - %d held", round, a.stock, rushStock, sold)
	}
	buyers := a.buyersView()
	for u, n := range held {
		if n > rushLimit || buyers[u] != n {
			t.Errorf("round %d: user %s holds %d (buyers says %d), limit %d", round, u, n, buyers[u], rushLimit)
		}
	}
	for k, n := range entries {
		if n != 1 {
			t.Errorf("round %d: request %s/%s won %d times", round, k.user, k.id, n)
		}
	}
	for k, answer := range log.wins {
		if d, ok := a.answerFor(k.user, k.id); !ok || fmt.Sprintf("%s %d", d.ReservationID, d.Remaining) != answer {
			t.Errorf("round %d: answered win %s/%s %s is lost (store has %+v)", round, k.user, k.id, answer, d)
		}
	}
	for id := range log.released {
		if _, ok := a.released[id]; !ok {
			t.Errorf("round %d: answered release %s is lost", round, id)
		}
	}
	for u := range log.limited {
		if perUser[u] < rushLimit {
			t.Errorf("round %d: %s was answered limit_reached, but only %d wins of theirs are on disk", round, u, perUser[u])
		}
	}
	if log.soldOut && a.entries.len() < rushStock {
		t.Errorf("round %d: sold_out was answered, but only %d wins are on disk", round, a.entries.len())
	}
	g := a.groups["orders"]
	for id := range log.acked {
		if i, ok := a.entryIndex(id); !ok || i >= g.next || g.pending[i] != nil {
			t.Errorf("round %d: acknowledged entry %s is back in the queue", round, id)
		}
	}
	deadIDs := map[string]int{}
	for _, w := range a.dead {
		deadIDs[w.ID]++
	}
	for id, n := range deadIDs {
		if n != 1 || log.acked[id] {
			t.Errorf("round %d: entry %s dead %d times, acked %v", round, id, n, log.acked[id])
		}
	}
	for id := range log.dead {
		if deadIDs[id] != 1 {
			t.Errorf("round %d: dead-lettered entry %s is not in the dead letters", round, id)
		}
	}
	entriesN, pendingN := a.entries.len(), len(g.pending)
	a.mu.Unlock()

	// Through the API: every answered win replays its first answer.
	ctx := context.Background()
	for k, answer := range log.wins {
		d, err := s.Admit(ctx, admission.Request{Activity: rushActivity, User: k.user, Qty: 1, RequestID: k.id})
		if err != nil || !d.Replayed || fmt.Sprintf("%s %d", d.ReservationID, d.Remaining) != answer {
			t.Errorf("round %d: retry of %s/%s = %+v, %v; want the replay of %s", round, k.user, k.id, d, err, answer)
			break
		}
	}
	t.Logf("round %d: child said %d lines; %d wins on disk (%d answered), %d released, %d acked, %d pending, %d dead; %d left",
		round, said, entriesN, len(log.wins), len(log.released), len(log.acked), pendingN, len(deadIDs), rushStock-sold)
}

package chaos

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimIdle is the order backends' -claim-idle in scenario 3: short, so that the survivor takes
// over the killed consumer's entries within the test.
const claimIdle = time.Second

// TestBackendKilled is scenario 3: two order backends consume one activity the whole time. A wave
// of buyers is admitted while the database is slow (the test holds the activity's stock row, so
// every order transaction waits), which leaves the whole wave in the queue; then the database is
// let go, both backends take full batches, and one of them is killed with SIGKILL while it holds
// delivered, unacknowledged entries. The other claims them; the killed one is restarted under its
// name. Every win becomes exactly one order, none twice, and reconcile passes. Every buyer wins
// here (stock for all), so the whole wave is queue work. The full run repeats it, killing the
// backends in turn. The stream's entries hold all the wins of one admission call, acknowledged win
// by win (docs/admission.md, "The wins queue"): the victim dies holding whole entries' wins, the
// survivor's claim must deliver every win not acknowledged and none that was, and the backlog and
// the victim's holdings are counted in wins. The wave must make entries of several wins (group
// admission under concurrent buyers), or it would leave the multi-win entries untested.
func TestBackendKilled(t *testing.T) {
	m := currentMode()
	wave := 3 * int(m.stock)
	// Limit 2 for one buy intent each, as in the other scenarios: a redelivered win admitted
	// again would show as a second order of its buyer instead of hiding behind the limit.
	act := newActivity("backend-kill", int64(m.rounds*wave), 2)
	e := newEnv(t, act)
	gw := e.startGateway("gateway")
	backends := []*backend{e.startBackend("backend-a", claimIdle), e.startBackend("backend-b", claimIdle)}

	d := newDriver(t, act.id, gw)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var ownPartial, madePartial int // rounds whose killed consumer left an entry partly acknowledged: by itself, by the test
	for round := 1; round <= m.rounds; round++ {
		victim, other := backends[(round-1)%2], backends[round%2]

		unlock := e.lockStock()
		queued0 := e.queued()
		last0 := e.lastEntry()
		d.start(ctx, makeBuyers(t, fmt.Sprintf("wave%d", round), wave, 1), m.conc)()
		pending, lag, err := e.backlog()
		if err != nil {
			t.Fatal(err)
		}
		if gained := e.queued() - queued0; pending+lag != gained || gained == 0 {
			t.Fatalf("round %d: %d wins queued behind the slow database, but the backlog is %d pending + %d undelivered", round, gained, pending, lag)
		}
		// The store's own count (:meta's wins less the group's acknowledged ones) agrees with
		// the raw one, and the wave made entries of several wins.
		if b, err := e.store.Backlog(ctx, act.id, group); err != nil || b != pending+lag {
			t.Fatalf("round %d: the store's backlog is %d (%v), the stream's %d pending + %d undelivered wins", round, b, err, pending, lag)
		}
		es := e.entriesAfter(last0)
		var sum, multi, most int64
		for _, x := range es {
			sum += x.wins
			if x.wins >= 2 {
				multi++
			}
			most = max(most, x.wins)
		}
		if sum != pending+lag {
			t.Fatalf("round %d: the wave's %d entries hold %d wins, the backlog is %d", round, len(es), sum, pending+lag)
		}
		if multi == 0 {
			t.Fatalf("round %d: the wave's %d wins are %d entries of one win each: no group admission, multi-win entries untested", round, sum, len(es))
		}
		t.Logf("round %d: the wave's %d wins are %d entries, %d of them with 2+ wins (at most %d)", round, sum, len(es), multi, most)
		unlock()

		// Mid-batch: the victim holds several delivered wins it has not acknowledged yet.
		var held int64
		for deadline := time.Now().Add(time.Minute); held < 8; time.Sleep(2 * time.Millisecond) {
			if held, err = e.pendingOf(victim.consumer); err != nil || time.Now().After(deadline) {
				t.Fatalf("round %d: %s never held a batch of 8 (%d, %v)", round, victim.name, held, err)
			}
		}
		victim.kill()
		killed := time.Now()
		left, err := e.pendingOf(victim.consumer)
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			t.Fatalf("round %d: %s held %d wins a moment before SIGKILL and none after: not killed mid-batch", round, victim.name, held)
		}
		// An entry partly acknowledged when its consumer died: the claim must deliver only
		// its wins not in :acked. Logged, not forced: the consumer acknowledges a batch with
		// one script call, so only a win left pending inside a batch makes one.
		_, partial, err := e.pendingWins(victim.consumer)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: %s killed holding %d entries partly acknowledged", round, victim.name, partial)
		if partial == 0 {
			// None: make one, as the killed consumer would have left it had it acknowledged all
			// but the last win of an entry (orders, results, then Ack) when it died. The
			// survivor is stopped (SIGSTOP) around the Ack, so that the entry's state after it
			// is the Ack's alone; a survivor that claimed the entry first leaves this round
			// without a partly acknowledged entry (logged).
			entry, ids, err := e.finishPartOfEntry(ctx, victim.consumer)
			if err != nil {
				t.Fatalf("round %d: finish part of an entry of %s: %v", round, victim.name, err)
			}
			if entry != "" {
				other.signal(syscall.SIGSTOP)
				at0, acked0, err0 := e.pendingAt(ctx, entry)
				var at string
				var acked int64
				if err0 == nil && at0 == victim.consumer && acked0 == 0 {
					if err = e.store.Ack(ctx, act.id, group, ids...); err == nil {
						at, acked, err = e.pendingAt(ctx, entry)
					}
				}
				other.signal(syscall.SIGCONT)
				switch {
				case err0 != nil || err != nil:
					t.Fatalf("round %d: acknowledge part of entry %s: %v, %v", round, entry, err0, err)
				case at0 != victim.consumer || acked0 != 0:
					t.Logf("round %d: %s claimed %s's entry %q before the test acknowledged part of it", round, other.name, victim.name, entry)
				case at != victim.consumer || acked != int64(len(ids)):
					// All but one win acknowledged: the entry must stay pending at the victim
					// with exactly those in :acked.
					t.Fatalf("round %d: %d of the wins of entry %s acknowledged, all but one: the entry is pending at %q with %d acknowledged", round, len(ids), entry, at, acked)
				default:
					madePartial++
					t.Logf("round %d: the test finished wins 1-%d of %s's entry %q and acknowledged them: the entry is pending at %q with %d wins acknowledged", round, len(ids), victim.name, entry, at, acked)
				}
			}
		}
		if partial > 0 {
			ownPartial++
		}
		// Only a claim moves a dead consumer's entries: the survivor must take all of them.
		waitFor(t, other.name+" claiming the killed consumer's entries", time.Minute, func() bool {
			n, err := e.pendingOf(victim.consumer)
			return err == nil && n == 0
		})
		claimed := time.Since(killed)
		if other.exited() {
			t.Fatalf("%s exited", other.name)
		}
		e.restartBackend(victim)
		waitFor(t, "the queue drained", e.mode.drain, func() bool {
			p, l, err := e.backlog()
			return err == nil && p+l == 0
		})
		// Every entry fully acknowledged is XACKed and its :acked field deleted.
		if fs := e.ackedEntryFields(); len(fs) > 0 {
			t.Fatalf("round %d: the queue drained but :acked still lists entries: %v", round, fs)
		}
		t.Logf("round %d: backlog of %d wins behind the slow database; %s killed holding %d unacknowledged wins; %s claimed them within %s; queue drained %s after the kill",
			round, pending+lag, victim.name, left, other.name, claimed.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	}
	t.Logf("rounds whose killed consumer left an entry partly acknowledged: %d by itself, %d finished in part by the test, of %d", ownPartial, madePartial, m.rounds)
	t.Logf("answers: %s", summary(d.snapshot()))
	e.verify(d)
}

// lockStock holds the activity's row of the database's stock table (SELECT ... FOR UPDATE in an
// open transaction) until unlock: every order transaction takes that row, so they all wait, as
// behind a slow database. The row exists once a backend has joined the queue.
func (e *env) lockStock() (unlock func()) {
	e.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		e.t.Fatalf("connect to the order database: %v", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		e.t.Fatalf("begin: %v", err)
	}
	tag, err := tx.Exec(ctx, `SELECT 1 FROM stock WHERE activity = $1 FOR UPDATE`, e.act.id)
	if err != nil || tag.RowsAffected() != 1 {
		e.t.Fatalf("lock the stock row of %s: %v (%s)", e.act.id, err, tag)
	}
	return func() {
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
	}
}

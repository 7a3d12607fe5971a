package orderbackend

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

var deadLetterKillScenarios = []scenario{
	{"RefusedKilledBeforeResult", func(t *testing.T, e *env) { testDeadLetterKilled(t, e, false) }},
	{"PoisonKilledBeforeRelease", func(t *testing.T, e *env) { testDeadLetterKilled(t, e, true) }},
}

// errKilled is every store call of a process after its SIGKILL.
var errKilled = errors.New("the process was killed")

// killedAfterDeadLetter is the env's store seen by a process SIGKILLed the moment its first dead
// letter is stored: that call succeeds, and nothing after it reaches the store.
type killedAfterDeadLetter struct {
	admission.Store
	kill   context.CancelFunc
	killed atomic.Bool
}

func (s *killedAfterDeadLetter) DeadLetter(ctx context.Context, activity, group string, w admission.Win, reason string) error {
	if s.killed.Load() {
		return errKilled
	}
	if err := s.Store.DeadLetter(ctx, activity, group, w, reason); err != nil {
		return err
	}
	s.killed.Store(true)
	s.kill()
	return nil
}

func (s *killedAfterDeadLetter) Release(ctx context.Context, activity, reservationID string) (bool, error) {
	if s.killed.Load() {
		return false, errKilled
	}
	return s.Store.Release(ctx, activity, reservationID)
}

func (s *killedAfterDeadLetter) SetResult(ctx context.Context, activity, user string, r admission.Result) error {
	if s.killed.Load() {
		return errKilled
	}
	return s.Store.SetResult(ctx, activity, user, r)
}

func (s *killedAfterDeadLetter) Ack(ctx context.Context, activity, group string, ids ...string) error {
	if s.killed.Load() {
		return errKilled
	}
	return s.Store.Ack(ctx, activity, group, ids...)
}

// A consumer killed right after it dead-lettered a win (refused by the database's stock guard, or
// poison) has told neither the store (a poison's release) nor the buyer (the failed result). Its
// restart repairs both: the buyer's /result must not say "queued" forever for a win that will
// never be an order (found in review).
func testDeadLetterKilled(t *testing.T, e *env, poison bool) {
	ctx := context.Background()
	e.openActivity(t, "sale", 3, 1, time.Minute)
	if err := e.store.EnsureGroup(ctx, "sale", DefaultGroup); err != nil {
		t.Fatal(err)
	}
	if err := e.repo.EnsureStock(ctx, "sale", 3); err != nil {
		t.Fatal(err)
	}
	user := "u1"
	if poison {
		poisonTrigger(t, e)
		user = "poison"
	} else {
		e.exec(t, `UPDATE stock SET "left" = 0`, `UPDATE stock SET "left" = 0`) // someone sold it elsewhere
	}
	d := e.admit(t, "sale", user, 1)

	// The first life: it dead-letters the win and is killed at once.
	runCtx, kill := context.WithCancel(ctx)
	defer kill()
	killed := &killedAfterDeadLetter{Store: e.store, kill: kill}
	c, err := NewConsumer(killed, e.repo, "sale", e.consumerOpts("c1", new(Metrics)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	if err := <-done; err != nil {
		t.Fatalf("first life: %v", err)
	}
	if !killed.killed.Load() {
		t.Fatal("the first life never dead-lettered the win")
	}
	dead, err := e.store.DeadLetters(ctx, "sale", 10)
	if err != nil || len(dead) != 1 || dead[0].ReservationID != d.ReservationID {
		t.Fatalf("dead letters = %+v, %v", dead, err)
	}
	if r := e.result(t, "sale", user); r.Code != resultQueued {
		t.Fatalf("result after the kill = %+v, want still queued", r)
	}

	// The second life, same name.
	m := new(Metrics)
	e.startConsumer(t, "sale", e.consumerOpts("c1", m))
	deadline := time.Now().Add(10 * time.Second)
	for r := e.result(t, "sale", user); r.Code != resultFailed; r = e.result(t, "sale", user) {
		if time.Now().After(deadline) {
			t.Fatalf("result of the dead-lettered win after the restart = %+v, want %q", r, resultFailed)
		}
		time.Sleep(10 * time.Millisecond)
	}
	want := int64(2) // the refused win's item stays held: the database has none for it
	if poison {
		want = 3
	}
	if n, err := e.store.Remaining(ctx, "sale"); err != nil || n != want {
		t.Errorf("remaining %d, %v; want %d", n, err, want)
	}
	if m.DeadLettered.Load() != 0 {
		t.Errorf("%d more dead letters after the restart", m.DeadLettered.Load())
	}
}

package localstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

func TestMemoryQueueConsumerGroup(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	ctx := context.Background()
	mustDefine(t, s, openAt(clock.Now(), "q", 100, 1))
	if _, err := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, false); !errors.Is(err, admission.ErrNotFound) {
		t.Errorf("read before EnsureGroup: %v, want ErrNotFound", err)
	}
	var want []admission.Decision
	for i := range 5 {
		want = append(want, mustAdmit(t, s, "q", "u"+strconv.Itoa(i), 1, "req-"+strconv.Itoa(i)))
	}
	if err := s.EnsureGroup(ctx, "q", "orders"); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureGroup(ctx, "q", "audit"); err != nil {
		t.Fatal(err)
	}

	// c1 reads three, c2 the other two: each entry goes to one consumer of the group.
	first, err := s.ReadGroup(ctx, "q", "orders", "c1", 3, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := s.ReadGroup(ctx, "q", "orders", "c2", 10, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 3 || len(rest) != 2 {
		t.Fatalf("c1 got %d, c2 got %d; want 3 and 2", len(first), len(rest))
	}
	for i, w := range append(first, rest...) {
		if w.ID != want[i].ReservationID || w.ReservationID != want[i].ReservationID || w.User != "u"+strconv.Itoa(i) ||
			w.RequestID != "req-"+strconv.Itoa(i) || w.Deliveries != 1 || !w.At.Equal(time.UnixMilli(clock.Now().UnixMilli())) {
			t.Errorf("entry %d = %+v", i, w)
		}
	}
	// Another group has its own position: it sees everything.
	if all, _ := s.ReadGroup(ctx, "q", "audit", "x", 100, 0, false); len(all) != 5 {
		t.Errorf("second group read %d entries, want 5", len(all))
	}

	// c1 "restarts": its unacknowledged entries come back, oldest first, one delivery more each.
	if err := s.Ack(ctx, "q", "orders", first[1].ID, "999-9"); err != nil {
		t.Fatal(err)
	}
	pend, err := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 2 || pend[0].ID != first[0].ID || pend[1].ID != first[2].ID || pend[0].Deliveries != 2 {
		t.Fatalf("pending after restart = %+v", pend)
	}
	if one, _ := s.ReadGroup(ctx, "q", "orders", "c1", 1, 0, true); len(one) != 1 || one[0].ID != first[0].ID || one[0].Deliveries != 3 {
		t.Errorf("pending with count 1 = %+v", one)
	}

	// Claim: c2 dies. Its entries are not idle yet, then they are (the store's clock moves).
	clock.Add(10 * time.Second)
	if got, _ := s.ReadGroup(ctx, "q", "orders", "c1", 10, 0, true); len(got) != 2 { // c1 is alive: resets its idle
		t.Fatalf("c1 pending = %+v", got)
	}
	clock.Add(20 * time.Second)
	claimed, err := s.Claim(ctx, "q", "orders", "c3", 25*time.Second, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 2 || claimed[0].ID != rest[0].ID || claimed[1].ID != rest[1].ID || claimed[0].Deliveries != 2 {
		t.Fatalf("claimed = %+v, want c2's two entries with 2 deliveries", claimed)
	}
	if again, _ := s.Claim(ctx, "q", "orders", "c4", 25*time.Second, 10); len(again) != 0 {
		t.Errorf("claim reset no idle time: c4 claimed %+v", again)
	}
	if p, _ := s.ReadGroup(ctx, "q", "orders", "c2", 10, 0, true); len(p) != 0 {
		t.Errorf("c2 still owns claimed entries: %+v", p)
	}
	if p, _ := s.ReadGroup(ctx, "q", "orders", "c3", 10, 0, true); len(p) != 2 || p[0].Deliveries != 3 {
		t.Errorf("c3 pending = %+v", p)
	}
	clock.Add(time.Minute)
	if one, _ := s.Claim(ctx, "q", "orders", "c4", time.Second, 1); len(one) != 1 || one[0].ID != first[0].ID {
		t.Errorf("claim count 1 = %+v, want the oldest pending entry", one)
	}

	// Dead letter: moved once, with the delivery count of the PEL, and acknowledged.
	poison := claimed[0]
	for range 2 {
		if err := s.DeadLetter(ctx, "q", "orders", poison, "bad row"); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := s.DeadLetters(ctx, "q", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].ID != poison.ID || dead[0].Reason != "bad row" || dead[0].Deliveries != 3 || dead[0].User != poison.User {
		t.Errorf("dead letters = %+v", dead)
	}
	if p, _ := s.ReadGroup(ctx, "q", "orders", "c3", 10, 0, true); len(p) != 1 || p[0].ID != claimed[1].ID {
		t.Errorf("c3 pending after dead letter = %+v", p)
	}
	snap, _ := s.Activity(ctx, "q")
	if snap.Queued != 5 || snap.Dead != 1 {
		t.Errorf("queued %d dead %d, want 5 and 1 (entries stay in the queue, like XLEN)", snap.Queued, snap.Dead)
	}
	if _, err := s.ReadGroup(ctx, "q", "orders", "c1", 0, 0, false); !errors.Is(err, admission.ErrBadInput) {
		t.Errorf("count 0: %v, want ErrBadInput", err)
	}
	if err := s.Ack(ctx, "q", "no-such-group", first[0].ID); err != nil {
		t.Errorf("ack on an unknown group: %v", err)
	}
}

func TestMemoryQueueBlockingRead(t *testing.T) {
	s := newMemory(t, nil)
	ctx := context.Background()
	mustDefine(t, s, openAt(time.Now(), "q", 100, 1))
	if err := s.EnsureGroup(ctx, "q", "g"); err != nil {
		t.Fatal(err)
	}
	// Two consumers wait; one win arrives: exactly one of them gets it, the other keeps waiting.
	type result struct {
		ws  []admission.Win
		err error
	}
	got := make(chan result, 2)
	for _, c := range []string{"c1", "c2"} {
		go func() {
			ws, err := s.ReadGroup(ctx, "q", "g", c, 10, 2*time.Second, false)
			got <- result{ws, err}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	d := mustAdmit(t, s, "q", "u1", 1, "r")
	r1 := <-got
	if r1.err != nil || len(r1.ws) != 1 || r1.ws[0].ReservationID != d.ReservationID {
		t.Fatalf("woken read = %+v, %v", r1.ws, r1.err)
	}
	r2 := <-got // times out empty
	if r2.err != nil || len(r2.ws) != 0 {
		t.Errorf("second reader = %+v, %v; want a timeout with nothing", r2.ws, r2.err)
	}

	// Without block, nothing new means an immediate empty answer.
	if ws, err := s.ReadGroup(ctx, "q", "g", "c1", 10, 0, false); err != nil || len(ws) != 0 {
		t.Errorf("non-blocking read = %+v, %v", ws, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := s.ReadGroup(cctx, "q", "g", "c1", 10, time.Minute, false)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("canceled read: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a canceled blocking read did not return")
	}
}

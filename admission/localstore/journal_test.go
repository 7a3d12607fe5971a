package localstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// callJournal keeps the changes of each journal call apart.
type callJournal struct{ calls [][]memChange }

func (j *callJournal) record(c memChange) memTicket {
	j.calls = append(j.calls, []memChange{c})
	return memTicket{}
}
func (j *callJournal) recordAll(cs []memChange) {
	j.calls = append(j.calls, append([]memChange(nil), cs...))
}

// A read of new entries hands its deliveries and the group's new position to the journal in one
// call, so that a Store commit holds all of them or none: a crash between them left a pending
// entry beyond the group's position, which the load refuses (found by TestLocalCrash in CI).
func TestMemoryReadGroupJournalsOneChange(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	j := &callJournal{}
	s.jnl = j
	ctx := context.Background()
	mustDefine(t, s, openAt(clock.Now(), "a", 10, 1))
	for _, u := range []string{"u1", "u2", "u3"} {
		mustAdmit(t, s, "a", u, 1, "r")
	}
	if err := s.EnsureGroup(ctx, "a", "g"); err != nil {
		t.Fatal(err)
	}
	j.calls = nil
	ws, err := s.ReadGroup(ctx, "a", "g", "c", 10, 0, false)
	if err != nil || len(ws) != 3 {
		t.Fatalf("read = %v, %v", ws, err)
	}
	if len(j.calls) != 1 {
		t.Fatalf("%d journal calls for one read, want 1: %+v", len(j.calls), j.calls)
	}
	cs := j.calls[0]
	if len(cs) != 4 || cs[3].kind != changeNext || cs[3].idx != 3 {
		t.Fatalf("the read's changes = %+v, want three deliveries and the new position 3", cs)
	}
	for i, c := range cs[:3] {
		if c.kind != changePending || c.idx != i || c.pend.consumer != "c" {
			t.Errorf("change %d = %+v, want the delivery of entry %d to c", i, c, i)
		}
	}
}

// hookJournal runs on[kind] (once) while it is handed a change of that kind, before keeping it.
type hookJournal struct {
	changes []memChange
	on      map[changeKind]func()
}

func (j *hookJournal) record(c memChange) memTicket {
	j.recordAll([]memChange{c})
	return memTicket{}
}
func (j *hookJournal) recordAll(cs []memChange) {
	for _, c := range cs {
		if f := j.on[c.kind]; f != nil {
			delete(j.on, c.kind)
			f()
		}
	}
	j.changes = append(j.changes, cs...)
}

// A new activity reaches the journal before any caller can find it: an admit that came between
// the two won a win journaled ahead of its activity's definition, which a crash then left in the
// Store's ring alone, and the load refused the folder for good (found in review). The admit
// here runs at the very moment the definition is handed to the journal.
func TestMemoryDefineJournaledBeforeVisible(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	var admitErr error
	j := &hookJournal{on: map[changeKind]func(){changeDefine: func() {
		_, admitErr = s.Admit(context.Background(), admission.Request{Activity: "a", User: "early", Qty: 1, RequestID: "r"})
	}}}
	s.jnl = j
	mustDefine(t, s, openAt(clock.Now(), "a", 10, 1))
	if !errors.Is(admitErr, admission.ErrUnknownActivity) {
		t.Errorf("an admit while the definition is being journaled: %v; want %v", admitErr, admission.ErrUnknownActivity)
	}
	if len(j.changes) == 0 || j.changes[0].kind != changeDefine {
		t.Fatalf("journal %+v: a change ahead of the activity's definition", j.changes)
	}
	mustAdmit(t, s, "a", "later", 1, "r")
	if n := len(j.changes); n != 2 || j.changes[1].kind != changeWin {
		t.Errorf("journal %+v: want the definition, then the later win", j.changes)
	}
}

// An activity is gone for no caller before its delete is journaled: a caller that found it gone
// was answered at once (nothing of its own to wait for), and a crash then brought it back. The
// list of activities, which takes no lock, is read at the moment the delete is handed to the
// journal (found in review).
func TestMemoryDeleteJournaledBeforeGone(t *testing.T) {
	clock := newFakeClock()
	s := newMemory(t, clock)
	a := openAt(clock.Now(), "a", 10, 1)
	a.Start, a.End = clock.Now().Add(time.Hour), clock.Now().Add(2*time.Hour)
	mustDefine(t, s, a)
	var listed []string
	s.jnl = &hookJournal{on: map[changeKind]func(){changeDelete: func() {
		var err error
		if listed, err = s.Activities(context.Background()); err != nil {
			t.Error(err)
		}
	}}}
	if err := s.Delete(context.Background(), "a", false); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0] != "a" {
		t.Errorf("activities while the delete was being journaled: %v; want [a]", listed)
	}
	if ids, _ := s.Activities(context.Background()); len(ids) != 0 {
		t.Errorf("activities after the delete: %v", ids)
	}
}

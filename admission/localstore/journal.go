package localstore

import "github.com/caddy-seckill/caddy-seckill/admission"

// memJournal receives every change a Memory makes to its state, in the order it makes them
// and while it holds the activity's lock (the line's lock for the waiting room's line, which
// Delete takes too), so that the changes of one activity arrive in the order they happened. Store
// persists them; a plain Memory has none.
type memJournal interface {
	// record records one change and returns its ticket (Store.Admit answers a win by it).
	record(c memChange) memTicket
	// recordAll records the changes of one operation at once: a commit holds all of them or none,
	// so a crash never leaves the disk in the middle of the operation (a delivery recorded in the
	// pending list without the group's new position, which a load refuses).
	recordAll(cs []memChange)
}

// memTicket is what the caller of a recorded change waits for to answer from that change alone:
// seq is the number of its operation's last change, 0 when the journal dropped it (the store had
// failed or stopped), and slow the last change up to seq that did not go into the ring. A
// journal that numbers nothing returns the zero ticket.
type memTicket struct{ seq, slow uint64 }

// changeKind says which part of an activity's state a memChange sets.
type changeKind uint8

const (
	changeDefine  changeKind = iota + 1 // def: the activity was created or redefined
	changeDelete                        // the activity and everything it owns are gone
	changeWin                           // entry (at idx) won, remaining left; the user's result is now queued
	changeRelease                       // entry.id was released
	changeResult                        // user's result is now result, set when the queue held idx entries
	changeGroup                         // consumer group was created
	changePending                       // group's PEL record for entry idx is now pend
	changeNext                          // group's next undelivered entry index is now idx
	changeAck                           // group's PEL record for entry idx is gone
	changeDead                          // group's PEL record for entry idx moved to the dead letters
	changeJoin                          // user took a place in the line: early with draw at, or late at offset at (then interval)
	changeDraw                          // the line's early joiners were ranked by their draws
	changeTerms                         // the line's terms were fixed (its first join): interval, session in at
)

// memChange is one state change; only the fields its kind names are set.
type memChange struct {
	kind      changeKind
	early     bool // changeJoin: an early joiner (in the padding after kind: costs no byte)
	act       string
	def       admission.Activity
	user      string
	group     string
	idx       int
	entry     memEntry
	remaining int64
	result    admission.Result
	pend      memPending // consumer, deliveries, at; for changeDead: deliveries
	reason    string
	// changeJoin: the early joiner's draw, or the late joiner's admission offset in ms after the
	// start and the interval the line moved at then (the next late joiner's offset follows it).
	// changeTerms: the line's interval, and its session in ms in at (a whole number).
	at, interval float64
}

// journal hands c to the store's journal, if it has one. The caller holds the activity's lock.
func (s *Memory) journal(c memChange) {
	if s.jnl != nil {
		s.jnl.record(c)
	}
}

// journalPending records group's PEL record for entry i.
func (s *Memory) journalPending(act, group string, i int, p *memPending) {
	if s.jnl != nil {
		s.jnl.record(memChange{kind: changePending, act: act, group: group, idx: i, pend: *p})
	}
}

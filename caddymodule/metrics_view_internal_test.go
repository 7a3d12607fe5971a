package caddymodule

import (
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
)

// TestActivityViews follows the node's view the activity metrics export: the sold-out moment is
// the first reading at zero, kept while the stock stays at zero, cleared by a release; the queue
// counters survive stock readings; activities the node does not know are not exported.
func TestActivityViews(t *testing.T) {
	c := newActivities(nil, nil)
	start := time.Date(2026, 12, 1, 20, 0, 0, 0, time.UTC)
	c.put(admission.Activity{ID: "a", Stock: 3, Start: start})
	at := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	view := func() activityView {
		t.Helper()
		vs := c.views()
		if len(vs) != 1 || vs[0].id != "a" {
			t.Fatalf("views = %+v, want a", vs)
		}
		return vs[0]
	}

	c.setStock("a", 3, at(0))
	c.setQueues("a", 0, 0)
	if v := view(); v.remaining != 3 || v.stock != 3 || !v.start.Equal(start) || !v.soldOutAt.IsZero() {
		t.Errorf("before the sale: %+v", v)
	}
	c.setStock("a", 0, at(2))
	c.setStock("a", 0, at(5))
	c.setQueues("a", 3, 1)
	if v := view(); !v.soldOutAt.Equal(at(2)) || v.wins != 3 || v.deadWins != 1 {
		t.Errorf("sold out at 2 s, read again at 5 s: %+v", v)
	}
	c.setStock("a", 0, at(1)) // an older reading arriving late changes nothing
	if v := view(); !v.soldOutAt.Equal(at(2)) {
		t.Errorf("a late reading moved the sold-out moment: %+v", v)
	}
	c.setStock("a", 1, at(6)) // a release
	if v := view(); !v.soldOutAt.IsZero() || v.remaining != 1 || v.wins != 3 {
		t.Errorf("after a release: %+v", v)
	}
	c.setStock("a", 0, at(9))
	if v := view(); !v.soldOutAt.Equal(at(9)) {
		t.Errorf("sold out again at 9 s: %+v", v)
	}

	c.setStock("b", 5, at(9)) // an id the node does not know (a hostile path) is not exported
	c.setQueues("nosuch", 1, 1)
	if vs := c.views(); len(vs) != 1 {
		t.Errorf("views = %+v, want only a", vs)
	}
}

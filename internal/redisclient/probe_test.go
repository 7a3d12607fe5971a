package redisclient

import (
	"maps"
	"slices"
	"testing"
)

// viewOf is a node's view: each master (id@addr:epoch) serves a third of the slots, in order.
func viewOf(origin string, known []string, masters ...claim) *view {
	v := &view{origin: origin, known: map[string]bool{}}
	for _, id := range known {
		v.known[id] = true
	}
	per := slotCount / len(masters)
	for i, m := range masters {
		end := (i+1)*per - 1
		if i == len(masters)-1 {
			end = slotCount - 1
		}
		v.claims = append(v.claims, rangeClaim{start: i * per, end: end, claim: m})
		v.known[m.id] = true
	}
	return v
}

func sorted(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// The table follows a failover as soon as one node names the promoted replica with its higher
// epoch, and no later read brings the replaced master back: not a node that has not heard of
// the promotion yet, not the replaced master itself when it continues, not even when it is the
// only one to answer. Only a majority that no longer knows a node drops it.
func TestSlotTableMerge(t *testing.T) {
	a := claim{id: "a", addr: "h:1", epoch: 1}
	b := claim{id: "b", addr: "h:2", epoch: 2}
	c := claim{id: "c", addr: "h:3", epoch: 3}
	a2 := claim{id: "a2", addr: "h:4", epoch: 4} // a's replica, promoted
	all := []string{"a", "b", "c", "a2", "b2", "c2"}
	var tb slotTable

	check := func(step string, got map[string]bool, want ...string) {
		t.Helper()
		if g := sorted(got); !slices.Equal(g, want) {
			t.Errorf("%s: masters %v, want %v", step, g, want)
		}
	}
	check("before the fault", tb.merge([]*view{viewOf("h:2", all, a, b, c), viewOf("h:3", all, a, b, c)}, 6), "h:1", "h:2", "h:3")
	// a stopped: it does not answer; the promoted replica answers first, the others lag.
	check("promotion seen by one node", tb.merge([]*view{viewOf("h:4", all, a2, b, c), viewOf("h:2", all, a, b, c), viewOf("h:3", all, a, b, c)}, 6),
		"h:2", "h:3", "h:4")
	check("a lagging node alone", tb.merge([]*view{viewOf("h:5", all, a, b, c)}, 6), "h:2", "h:3", "h:4")
	check("the replaced master continues, alone", tb.merge([]*view{viewOf("h:1", all, a, b, c)}, 6), "h:2", "h:3", "h:4")
	check("a majority that has not heard yet, and a", tb.merge([]*view{viewOf("h:1", all, a, b, c), viewOf("h:2", all, a, b, c),
		viewOf("h:3", all, a, b, c), viewOf("h:5", all, a, b, c)}, 6), "h:2", "h:3", "h:4")
	// a fails back: a higher epoch again.
	a5 := claim{id: "a", addr: "h:1", epoch: 5}
	check("failback", tb.merge([]*view{viewOf("h:1", all, a5, b, c)}, 6), "h:1", "h:2", "h:3")
	// The cluster is rebuilt: new ids, epochs from 0; a majority answers and knows none of the old.
	n := []string{"x", "y", "z"}
	x, y, z := claim{id: "x", addr: "h:1", epoch: 0}, claim{id: "y", addr: "h:2", epoch: 0}, claim{id: "z", addr: "h:7", epoch: 0}
	check("rebuilt, a minority answers", tb.merge([]*view{viewOf("h:1", n, x, y, z)}, 3+3), "h:1", "h:2", "h:3")
	check("rebuilt, a majority answers", tb.merge([]*view{viewOf("h:1", n, x, y, z), viewOf("h:2", n, x, y, z)}, 3), "h:1", "h:2", "h:7")
	// Equal epochs (a cluster before its epoch collisions are resolved): the claim more views make.
	var tie slotTable
	p, q := claim{id: "p", addr: "h:8", epoch: 0}, claim{id: "q", addr: "h:9", epoch: 0}
	check("tie", tie.merge([]*view{viewOf("h:8", nil, p), viewOf("h:9", nil, q), viewOf("h:10", nil, q)}, 3), "h:9")
}

func TestGoredisAddr(t *testing.T) {
	for _, c := range []struct{ addr, origin, want string }{
		{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7000"},
		{"127.0.0.1:7000", "localhost:7001", "127.0.0.1:7000"},
		{"127.0.0.1:7000", "10.0.0.5:7001", "10.0.0.5:7000"},
		{"10.0.0.6:7000", "10.0.0.5:7001", "10.0.0.6:7000"},
		{"10.0.0.6:0", "10.0.0.5:7001", "10.0.0.6:7001"},
		{"redis-1:7000", "10.0.0.5:7001", "redis-1:7000"},
	} {
		if got := goredisAddr(c.addr, c.origin); got != c.want {
			t.Errorf("goredisAddr(%q, %q) = %q, want %q", c.addr, c.origin, got, c.want)
		}
	}
}

func TestParseNodes(t *testing.T) {
	epochs, known := parseNodes("e7d1 127.0.0.1:30004@31004 slave 67ed 0 1426238317239 4 connected\n" +
		"67ed 127.0.0.1:30002@31002,host-2 master - 0 1426238316232 12 connected 5461-10922 [10923->-e7d1]\n" +
		"garbage\n")
	if epochs["e7d1"] != 4 || epochs["67ed"] != 12 || !known["e7d1"] || !known["67ed"] || len(known) != 2 {
		t.Errorf("parseNodes: epochs %v, known %v", epochs, known)
	}
}

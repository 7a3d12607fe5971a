package caddymodule

import (
	"strconv"
	"testing"
)

// TestChildren checks the cache of resolved metric children: one resolution per label set, the
// same child afterwards, and no growth past maxChildren (the vector is asked directly then).
func TestChildren(t *testing.T) {
	var c children[string, *int]
	calls := 0
	resolve := func() *int { calls++; return new(int) }
	a := c.get("a", resolve)
	if b := c.get("a", resolve); b != a || calls != 1 {
		t.Fatalf("second get: same child %v, %d resolutions; want the same child, 1", b == a, calls)
	}
	for i := range maxChildren + 10 {
		c.get(strconv.Itoa(i), resolve)
	}
	if n := len(*c.m.Load()); n != maxChildren {
		t.Errorf("%d children cached, want the bound %d", n, maxChildren)
	}
	before := calls
	c.get(strconv.Itoa(maxChildren+5), resolve)
	if calls != before+1 {
		t.Error("a label set past the bound was not resolved again")
	}
	if c.get("a", resolve) != a {
		t.Error("a cached child was replaced")
	}
}

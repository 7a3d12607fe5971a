//go:build !race

package hashedurl

import (
	"strings"
	"testing"
)

// The race detector allocates on its own (and drops pooled values), so this runs without it.

// TestKeyAllocations pins the point of Key: a verification allocates nothing, a signature only
// its string. A long field (beyond the pooled buffer's bound) must not break the pool either.
func TestKeyAllocations(t *testing.T) {
	k := NewKey(secret)
	h := k.Sign("phone-1001", "alice", "salt-1")
	k.Verify("phone-1001", "alice", "salt-1", strings.Repeat("x", 2*maxPooledInput)) // wrong length: no MAC
	k.Sign("phone-1001", strings.Repeat("u", 2*maxPooledInput), "salt-1")            // grows a buffer, not pooled
	if n := testing.AllocsPerRun(100, func() { k.Verify("phone-1001", "alice", "salt-1", h) }); n != 0 {
		t.Errorf("Verify: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { _ = k.Sign("phone-1001", "alice", "salt-1") }); n != 1 {
		t.Errorf("Sign: %v allocations, want 1", n)
	}
	buf := make([]byte, 0, 128)
	if n := testing.AllocsPerRun(100, func() { buf = k.AppendSign(buf[:0], "phone-1001", "alice", "salt-1") }); n != 0 {
		t.Errorf("AppendSign into room: %v allocations, want 0", n)
	}
}

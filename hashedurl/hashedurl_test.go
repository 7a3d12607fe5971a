package hashedurl

import (
	"crypto/rand"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestRoundTrip(t *testing.T) {
	h := Sign(secret, "phone-1001", "alice", "salt-1")
	if len(h) != HashLen || HashLen != 43 {
		t.Fatalf("hash %q has length %d, HashLen %d; want 43", h, len(h), HashLen)
	}
	if strings.ContainsAny(h, "+/=") {
		t.Errorf("hash %q is not unpadded base64url", h)
	}
	if !Verify(secret, "phone-1001", "alice", "salt-1", h) {
		t.Fatal("the signed hash does not verify")
	}
	if Sign(secret, "phone-1001", "alice", "salt-1") != h {
		t.Error("Sign is not deterministic")
	}
}

func TestVerifyRejects(t *testing.T) {
	h := Sign(secret, "phone-1001", "alice", "salt-1")
	flipped := []rune(h)
	for i, r := range flipped {
		if unicode.IsLetter(r) {
			if unicode.IsUpper(r) {
				flipped[i] = unicode.ToLower(r)
			} else {
				flipped[i] = unicode.ToUpper(r)
			}
			break
		}
	}
	random := make([]byte, 32)
	rand.Read(random)

	cases := map[string]struct{ activity, user, salt, hash string }{
		"another user's hash":     {"phone-1001", "alice", "salt-1", Sign(secret, "phone-1001", "bob", "salt-1")},
		"another activity's hash": {"phone-1001", "alice", "salt-1", Sign(secret, "phone-2002", "alice", "salt-1")},
		"a different salt":        {"phone-1001", "alice", "salt-2", h},
		"another user":            {"phone-1001", "bob", "salt-1", h},
		"case-flipped":            {"phone-1001", "alice", "salt-1", string(flipped)},
		"random":                  {"phone-1001", "alice", "salt-1", Sign(random, "phone-1001", "alice", "salt-1")},
		"empty":                   {"phone-1001", "alice", "salt-1", ""},
		"truncated":               {"phone-1001", "alice", "salt-1", h[:42]},
		"padded":                  {"phone-1001", "alice", "salt-1", h + "="},
		"very long":               {"phone-1001", "alice", "salt-1", strings.Repeat(h, 10_000)},
		"standard alphabet":       {"phone-1001", "alice", "salt-1", strings.NewReplacer("-", "+", "_", "/").Replace(h)},
		"shifted field boundary":  {"phone-1001", "alic", "esalt-1", h},
		"other secret":            {"phone-1001", "alice", "salt-1", Sign([]byte("another secret, also 32 bytes.."), "phone-1001", "alice", "salt-1")},
	}
	for name, c := range cases {
		if c.hash == h && c.activity == "phone-1001" && c.user == "alice" && c.salt == "salt-1" {
			t.Fatalf("%s: test case is the valid hash", name)
		}
		if Verify(secret, c.activity, c.user, c.salt, c.hash) {
			t.Errorf("%s: verified", name)
		}
	}
	if Verify(nil, "a", "u", "s", Sign(nil, "a", "u", "s")) {
		t.Error("an empty secret verifies")
	}
}

// TestSpareBits checks that a hash differing from the true one only in the last character's
// unused bits is refused: decoding would map both to the same MAC.
func TestSpareBits(t *testing.T) {
	h := Sign(secret, "a", "u", "s")
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, h[len(h)-1])
	for i := 1; i < 4; i++ {
		alt := h[:len(h)-1] + string(alphabet[last^i])
		if Verify(secret, "a", "u", "s", alt) {
			t.Errorf("alternative spelling %q of %q verifies", alt, h)
		}
	}
}

// fuzzKey is shared by every fuzz input, so that its pooled states carry over between them.
var fuzzKey = NewKey(secret)

func FuzzVerify(f *testing.F) {
	valid := Sign(secret, "phone-1001", "alice", "salt-1")
	f.Add("phone-1001", "alice", "salt-1", valid)
	f.Add("phone-1001", "alice", "salt-1", "")
	f.Add("phone-1001", "alic", "esalt-1", valid)
	f.Add("", "", "", strings.Repeat("A", 43))
	f.Add("phone-1001", "alice", "salt-1", valid[:42]+"\x00")
	f.Fuzz(func(t *testing.T, activity, user, salt, hash string) {
		ok := Verify(secret, activity, user, salt, hash)
		want := hash == Sign(secret, activity, user, salt)
		if ok != want {
			t.Fatalf("Verify(%q, %q, %q, %q) = %v, want %v", activity, user, salt, hash, ok, want)
		}
		// The pooled Key, reused across inputs, must decide alike.
		if kok := fuzzKey.Verify(activity, user, salt, hash); kok != ok {
			t.Fatalf("Key.Verify(%q, %q, %q, %q) = %v, Verify = %v", activity, user, salt, hash, kok, ok)
		}
		if ok && (activity != "phone-1001" || user != "alice" || salt != "salt-1") && hash == valid {
			t.Fatalf("the hash of (phone-1001, alice, salt-1) verifies for (%q, %q, %q)", activity, user, salt)
		}
	})
}

// TestKeyMatchesFunctions checks that a Key answers as the package's functions do, through its
// pooled states, from many goroutines at once (run with -race).
func TestKeyMatchesFunctions(t *testing.T) {
	k := NewKey(secret)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				act, user, salt := "act-"+strconv.Itoa(g), "user-"+strconv.Itoa(i), strings.Repeat("s", i)
				h := Sign(secret, act, user, salt)
				if got := k.Sign(act, user, salt); got != h {
					t.Errorf("Key.Sign(%q, %q, %q) = %q, want %q", act, user, salt, got, h)
					return
				}
				if got := string(k.AppendSign([]byte("/buy/"), act, user, salt)); got != "/buy/"+h {
					t.Errorf("AppendSign = %q, want %q", got, "/buy/"+h)
					return
				}
				if !k.Verify(act, user, salt, h) || k.Verify(act, user+"x", salt, h) {
					t.Errorf("Key.Verify disagrees with Sign for (%q, %q, %q)", act, user, salt)
					return
				}
			}
		})
	}
	wg.Wait()
	if NewKey(nil).Verify("a", "u", "s", NewKey(nil).Sign("a", "u", "s")) {
		t.Error("a Key with an empty secret verifies")
	}
}

// The benchmarks sign and verify the bench's buy path: what every path and buy call runs.
//
//	go test ./hashedurl/ -run '^$' -bench . -benchmem
func BenchmarkSign(b *testing.B) {
	k := NewKey(secret)
	b.ReportAllocs()
	for b.Loop() {
		_ = k.Sign("bench-3", "u12345", "0123456789abcdef0123456789abcdef")
	}
}

func BenchmarkVerify(b *testing.B) {
	k := NewKey(secret)
	h := k.Sign("bench-3", "u12345", "0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	for b.Loop() {
		if !k.Verify("bench-3", "u12345", "0123456789abcdef0123456789abcdef", h) {
			b.Fatal("the hash does not verify")
		}
	}
}

func BenchmarkVerifyParallel(b *testing.B) {
	k := NewKey(secret)
	h := k.Sign("bench-3", "u12345", "0123456789abcdef0123456789abcdef")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !k.Verify("bench-3", "u12345", "0123456789abcdef0123456789abcdef", h) {
				b.Error("the hash does not verify")
				return
			}
		}
	})
}

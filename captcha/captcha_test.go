package captcha

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"image/png"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// stores runs f against a memory store and a Redis store on a private redis-server.
func stores(t *testing.T, f func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { f(t, NewMemoryStore(100)) })
	t.Run("redis", func(t *testing.T) {
		srv := testsrv.StartRedis(t)
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { client.Close() })
		f(t, NewRedisStore(client, "test"))
	})
}

// solution reads the digits of a captcha straight from the store, as only a test may.
func solution(t *testing.T, s Store, id string) string {
	t.Helper()
	c, err := s.Peek(context.Background(), id)
	if err != nil {
		t.Fatalf("peek %s: %v", id, err)
	}
	var b strings.Builder
	for _, d := range c.Digits {
		b.WriteByte('0' + d)
	}
	return b.String()
}

func TestVerify(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{})
		id, err := is.New(ctx, "alice", "sale")
		if err != nil {
			t.Fatal(err)
		}
		answer := solution(t, s, id)
		if len(answer) != DefaultLength {
			t.Fatalf("answer %q, want %d digits", answer, DefaultLength)
		}
		spaced := answer[:3] + " " + answer[3:]
		if ok, err := is.Verify(ctx, id, "alice", "sale", spaced); err != nil || !ok {
			t.Fatalf("right answer %q: %v, %v", spaced, ok, err)
		}
		if ok, err := is.Verify(ctx, id, "alice", "sale", answer); err != nil || ok {
			t.Fatalf("second verify: %v, %v; want false (single use)", ok, err)
		}
		if _, err := is.Image(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("image of a used captcha: %v, want ErrNotFound", err)
		}
	})
}

func TestVerifyWrongAnswerConsumes(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{})
		cases := map[string]func(answer string) string{
			"wrong answer": wrongDigit,
			"too short":    func(a string) string { return a[:len(a)-1] },
			"too long":     func(a string) string { return a + "0" },
			"letters":      func(a string) string { return a[:len(a)-1] + "x" },
			"empty":        func(string) string { return "" },
		}
		for name, mk := range cases {
			id, err := is.New(ctx, "alice", "sale")
			if err != nil {
				t.Fatal(err)
			}
			answer := solution(t, s, id)
			if ok, err := is.Verify(ctx, id, "alice", "sale", mk(answer)); err != nil || ok {
				t.Errorf("%s: %v, %v; want false", name, ok, err)
			}
			if ok, err := is.Verify(ctx, id, "alice", "sale", answer); err != nil || ok {
				t.Errorf("%s: the right answer after a failed attempt: %v, %v; want false (consumed)", name, ok, err)
			}
		}
		for _, id := range []string{"", "nope", "../../etc", "a}b", strings.Repeat("A", 65)} {
			if ok, err := is.Verify(ctx, id, "alice", "sale", "123456"); err != nil || ok {
				t.Errorf("unknown id %q: %v, %v; want false, nil", id, ok, err)
			}
		}
	})
}

// TestVerifyNotOwnerKeeps: a captcha is bound to its user and its activity. Anyone else's attempt,
// even with the right digits, is refused and does not use the captcha up (issue 32, item 7: the id
// is in the image URL, which needs no login).
func TestVerifyNotOwnerKeeps(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{})
		cases := map[string]struct{ user, activity string }{
			"another user":             {"mallory", "sale"},
			"the owner, another sale":  {"alice", "other"},
			"another user, other sale": {"mallory", "other"},
		}
		for name, c := range cases {
			id, err := is.New(ctx, "alice", "sale")
			if err != nil {
				t.Fatal(err)
			}
			answer := solution(t, s, id)
			for _, typed := range []string{answer, wrongDigit(answer), ""} {
				if ok, err := is.Verify(ctx, id, c.user, c.activity, typed); err != nil || ok {
					t.Errorf("%s, answer %q: %v, %v; want false", name, typed, ok, err)
				}
			}
			if _, err := is.Image(ctx, id); err != nil {
				t.Errorf("%s: the image after the refused attempts: %v", name, err)
			}
			if ok, err := is.Verify(ctx, id, "alice", "sale", answer); err != nil || !ok {
				t.Errorf("%s: the owner's right answer afterwards: %v, %v; want true (not consumed)", name, ok, err)
			}
		}
	})
}

// TestTakeOtherOwnerDeletesNothing checks the store itself: Take for another owner is ErrNotFound
// and leaves the captcha, its image and its fetch count in place.
func TestTakeOtherOwnerDeletesNothing(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		c := Challenge{User: "alice", Activity: "sale", Digits: []byte{1, 2, 3, 4}, PNG: []byte("png")}
		if err := s.Put(ctx, "id", c, time.Minute); err != nil {
			t.Fatal(err)
		}
		if n, err := s.CountFetch(ctx, "id"); err != nil || n != 1 {
			t.Fatalf("first fetch: %d, %v", n, err)
		}
		for _, o := range []Owner{{"mallory", "sale"}, {"alice", "other"}, {"alice", ""}, {"", "sale"}, {}} {
			if got, err := s.Take(ctx, "id", o); !errors.Is(err, ErrNotFound) {
				t.Errorf("take for %+v: %+v, %v; want ErrNotFound", o, got, err)
			}
		}
		if got, err := s.Peek(ctx, "id"); err != nil || string(got.PNG) != "png" || got.Activity != "sale" {
			t.Fatalf("peek after the refused takes: %+v, %v", got, err)
		}
		if n, err := s.CountFetch(ctx, "id"); err != nil || n != 2 {
			t.Errorf("fetch after the refused takes: %d, %v; want 2, nil", n, err)
		}
		got, err := s.Take(ctx, "id", Owner{User: "alice", Activity: "sale"})
		if err != nil || got.User != "alice" || got.Activity != "sale" || !bytes.Equal(got.Digits, c.Digits) {
			t.Fatalf("take by the owner: %+v, %v", got, err)
		}
		if _, err := s.Take(ctx, "id", Owner{User: "alice", Activity: "sale"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("second take by the owner: %v, want ErrNotFound", err)
		}
	})
}

// TestConcurrentAttackersDoNotBurn races other users' right answers against the owner's: the
// owner's captcha survives them all, and exactly one of the owner's attempts is true.
func TestConcurrentAttackersDoNotBurn(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{})
		for round := 0; round < 5; round++ {
			id, err := is.New(ctx, "alice", "sale")
			if err != nil {
				t.Fatal(err)
			}
			answer := solution(t, s, id)
			var owner, others atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < 24; g++ {
				user, activity := "alice", "sale"
				switch g % 3 {
				case 1:
					user = "mallory"
				case 2:
					activity = "other"
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ok, err := is.Verify(ctx, id, user, activity, answer)
					if err != nil {
						t.Error(err)
					}
					switch {
					case ok && user == "alice" && activity == "sale":
						owner.Add(1)
					case ok:
						others.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n, m := owner.Load(), others.Load(); n != 1 || m != 0 {
				t.Fatalf("round %d: %d of the owner's 8 right answers verified (want 1), %d of the others' (want 0)", round, n, m)
			}
		}
	})
}

func wrongDigit(a string) string {
	b := []byte(a)
	b[0] = '0' + (b[0]-'0'+1)%10
	return string(b)
}

func TestImage(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{MaxFetches: 3})
		id, err := is.New(ctx, "alice", "sale")
		if err != nil {
			t.Fatal(err)
		}
		first, err := is.Image(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(first))
		if err != nil {
			t.Fatalf("not a PNG: %v", err)
		}
		if b := img.Bounds(); b.Dx() != DefaultWidth || b.Dy() != DefaultHeight {
			t.Errorf("image is %v, want %dx%d", b, DefaultWidth, DefaultHeight)
		}
		for i := 2; i <= 3; i++ {
			again, err := is.Image(ctx, id)
			if err != nil {
				t.Fatalf("fetch %d: %v", i, err)
			}
			if !bytes.Equal(again, first) {
				t.Fatalf("fetch %d returned a different image", i)
			}
		}
		if _, err := is.Image(ctx, id); !errors.Is(err, ErrTooManyFetches) {
			t.Fatalf("fetch 4: %v, want ErrTooManyFetches", err)
		}
		// Fetching does not use the captcha up.
		if ok, err := is.Verify(ctx, id, "alice", "sale", solution(t, s, id)); err != nil || !ok {
			t.Errorf("verify after fetches: %v, %v", ok, err)
		}

		other, err := is.New(ctx, "alice", "sale")
		if err != nil {
			t.Fatal(err)
		}
		if img2, err := is.Image(ctx, other); err != nil || bytes.Equal(img2, first) {
			t.Errorf("a second captcha: %v, same image %v", err, bytes.Equal(img2, first))
		}
		for _, id := range []string{"", "UNKNOWN", "a:b"} {
			if _, err := is.Image(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("image of %q: %v, want ErrNotFound", id, err)
			}
		}
	})
}

// TestAudio: the audio is a WAV of the captcha's digits, and its fetches count with the image's
// against MaxFetches, so the audio is no way around the cap.
func TestAudio(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{MaxFetches: 3, AudioLanguage: "ru"})
		id, err := is.New(ctx, "alice", "sale")
		if err != nil {
			t.Fatal(err)
		}
		wav, err := is.Audio(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(wav) < 44 || string(wav[:4]) != "RIFF" || string(wav[8:12]) != "WAVE" {
			t.Fatalf("not a WAV file: % x", wav[:min(len(wav), 16)])
		}
		if size := binary.LittleEndian.Uint32(wav[4:8]); int(size) != len(wav)-8 {
			t.Errorf("RIFF size %d, file %d bytes", size, len(wav))
		}
		if _, err := is.Image(ctx, id); err != nil {
			t.Fatalf("image after one audio fetch: %v", err)
		}
		if _, err := is.Audio(ctx, id); err != nil {
			t.Fatalf("third fetch: %v", err)
		}
		if _, err := is.Audio(ctx, id); !errors.Is(err, ErrTooManyFetches) {
			t.Fatalf("fourth fetch (audio): %v, want ErrTooManyFetches", err)
		}
		if _, err := is.Image(ctx, id); !errors.Is(err, ErrTooManyFetches) {
			t.Fatalf("fifth fetch (image): %v, want ErrTooManyFetches", err)
		}
		if ok, err := is.Verify(ctx, id, "alice", "sale", solution(t, s, id)); err != nil || !ok {
			t.Fatalf("verify after fetches: %v, %v", ok, err)
		}
		for _, id := range []string{id, "", "UNKNOWN"} {
			if _, err := is.Audio(ctx, id); !errors.Is(err, ErrNotFound) {
				t.Errorf("audio of used or unknown %q: %v, want ErrNotFound", id, err)
			}
		}
	})
}

func TestCountFetchUnknownCreatesNothing(t *testing.T) {
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	s := NewRedisStore(client, "test")
	ctx := context.Background()
	if _, err := s.CountFetch(ctx, "UNKNOWN"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("CountFetch of an unknown id: %v", err)
	}
	if n, err := client.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("%d keys after fetching an unknown captcha (%v), want 0", n, err)
	}
	is := NewIssuer(s, Options{})
	id, err := is.New(ctx, "alice", "sale")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := is.Image(ctx, id); err != nil {
		t.Fatal(err)
	}
	keys, _ := client.Keys(ctx, "*").Result()
	for _, k := range keys {
		if ttl := client.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("key %s has no expiry (PTTL %v)", k, ttl)
		}
		if !strings.HasPrefix(k, "test:captcha:{"+id+"}") {
			t.Errorf("key %s outside the captcha's hash tag", k)
		}
	}
	if len(keys) != 3 {
		t.Errorf("keys %v, want the challenge, png and fetch counter", keys)
	}
	if _, err := is.Verify(ctx, id, "alice", "sale", "x"); err != nil {
		t.Fatal(err)
	}
	if n := client.DBSize(ctx).Val(); n != 0 {
		t.Errorf("%d keys left after verify, want 0", n)
	}
}

func TestTTLExpiry(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		c := Challenge{User: "alice", Activity: "sale", Digits: []byte{1, 2, 3, 4}, PNG: []byte("png")}
		// The live check only counts while the short TTL is surely not over: on a loaded machine
		// the calls before it may take longer than the TTL.
		const ttl = 100 * time.Millisecond
		start := time.Now()
		if err := s.Put(ctx, "short", c, ttl); err != nil {
			t.Fatal(err)
		}
		if _, err := s.CountFetch(ctx, "short"); err != nil && time.Since(start) < ttl/2 {
			t.Fatalf("fetch within the ttl: %v", err)
		}
		if err := s.Put(ctx, "long", c, time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(start.Add(ttl + 50*time.Millisecond)))
		if _, err := s.Peek(ctx, "short"); !errors.Is(err, ErrNotFound) {
			t.Errorf("peek after ttl: %v, want ErrNotFound", err)
		}
		if _, err := s.CountFetch(ctx, "short"); !errors.Is(err, ErrNotFound) {
			t.Errorf("fetch after ttl: %v, want ErrNotFound", err)
		}
		if _, err := s.Take(ctx, "short", Owner{User: "alice", Activity: "sale"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("take after ttl: %v, want ErrNotFound", err)
		}
		got, err := s.Take(ctx, "long", Owner{User: "alice", Activity: "sale"})
		if err != nil || got.User != "alice" || got.Activity != "sale" || !bytes.Equal(got.Digits, c.Digits) {
			t.Errorf("take of a live captcha: %+v, %v", got, err)
		}
	})
}

func TestConcurrentVerifyAtMostOne(t *testing.T) {
	stores(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		is := NewIssuer(s, Options{})
		for round := 0; round < 5; round++ {
			id, err := is.New(ctx, "alice", "sale")
			if err != nil {
				t.Fatal(err)
			}
			answer := solution(t, s, id)
			var wins atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := 0; g < 20; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ok, err := is.Verify(ctx, id, "alice", "sale", answer)
					if err != nil {
						t.Error(err)
					}
					if ok {
						wins.Add(1)
					}
				}()
			}
			close(start)
			wg.Wait()
			if n := wins.Load(); n != 1 {
				t.Fatalf("round %d: %d of 20 concurrent right answers verified, want exactly 1", round, n)
			}
		}
	})
}

func TestMemoryStoreBounded(t *testing.T) {
	s := NewMemoryStore(10).(*memoryStore)
	ctx := context.Background()
	is := NewIssuer(s, Options{})
	var ids []string
	for i := 0; i < 25; i++ {
		id, err := is.New(ctx, "u", "sale")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if n := len(s.items); n != 10 || s.order.Len() != 10 {
		t.Fatalf("%d items (%d in order), want 10", n, s.order.Len())
	}
	if _, err := s.Peek(ctx, ids[0]); !errors.Is(err, ErrNotFound) {
		t.Errorf("the oldest captcha survived: %v", err)
	}
	if _, err := s.Peek(ctx, ids[24]); err != nil {
		t.Errorf("the newest captcha was evicted: %v", err)
	}
}

func TestStoreCopies(t *testing.T) {
	s := NewMemoryStore(10)
	ctx := context.Background()
	c := Challenge{User: "u", Digits: []byte{1, 2, 3, 4}, PNG: []byte("png")}
	if err := s.Put(ctx, "id", c, time.Minute); err != nil {
		t.Fatal(err)
	}
	c.Digits[0] = 9
	got, _ := s.Peek(ctx, "id")
	got.PNG[0] = 'X'
	again, _ := s.Peek(ctx, "id")
	if again.Digits[0] != 1 || string(again.PNG) != "png" {
		t.Errorf("the store shares memory with its callers: %+v", again)
	}
}

func TestOptions(t *testing.T) {
	if err := (Options{}).Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, o := range []Options{{Length: 3}, {Length: 11}, {Width: 10}, {Height: 1000}, {TTL: time.Millisecond}, {MaxFetches: -1},
		{AudioLanguage: "de"}, {AudioLanguage: "EN"}} {
		if err := o.Validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	is := NewIssuer(NewMemoryStore(0), Options{Length: 4, Width: 120, Height: 40})
	id, err := is.New(context.Background(), "u", "sale")
	if err != nil {
		t.Fatal(err)
	}
	b, err := is.Image(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil || img.Bounds().Dx() != 120 || img.Bounds().Dy() != 40 {
		t.Errorf("custom size: %v, %v", img.Bounds(), err)
	}
	if _, err := is.New(context.Background(), "", "sale"); err == nil {
		t.Error("captcha issued to an empty user")
	}
	if _, err := is.New(context.Background(), "u", ""); err == nil {
		t.Error("captcha issued for an empty activity")
	}
}

func BenchmarkNew(b *testing.B) {
	is := NewIssuer(NewMemoryStore(1000), Options{})
	ctx := context.Background()
	for b.Loop() {
		if _, err := is.New(ctx, "u", "sale"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRedisTakeForeignValue: a value under a captcha's key that Put did not write (not a JSON
// object, or an earlier build's challenge without an activity) has no owner: Take answers
// ErrNotFound and deletes nothing.
func TestRedisTakeForeignValue(t *testing.T) {
	srv := testsrv.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	s := NewRedisStore(client, "")
	ctx := context.Background()
	for _, v := range []string{"null", "5", `"x"`, "[]", "{not json", `{"u":"alice","d":"AQID"}`} {
		if err := client.Set(ctx, "seckill:captcha:{id}", v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Take(ctx, "id", Owner{User: "alice", Activity: "sale"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("take of %s: %+v, %v; want ErrNotFound", v, got, err)
		}
		if n := client.Exists(ctx, "seckill:captcha:{id}").Val(); n != 1 {
			t.Errorf("take of %s deleted the value", v)
		}
	}
}

package redisstore

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// commandCounter is a go-redis hook counting every command a client sends, pipelined or not.
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// guardRedisStore returns a Store on its own client, with a command counter on that client.
func guardRedisStore(t *testing.T, addr string, tune func(*redis.Options)) (*Store, *commandCounter) {
	t.Helper()
	o := &redis.Options{Addr: addr, MaxRetries: 3, DialTimeout: time.Second}
	if tune != nil {
		tune(o)
	}
	client := redis.NewClient(o)
	counter := &commandCounter{}
	client.AddHook(counter)
	s, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, counter
}

// Two nodes, each a Guard on its own client over one redis-server: after the sell-out their
// rejections cost Redis nothing, and a release from a third process reopens both via pub/sub.
func TestGuardRedisSoldOutAndRestock(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s1, n1 := guardRedisStore(t, srv.Addr, nil)
	s2, n2 := guardRedisStore(t, srv.Addr, nil)
	s3, _ := guardRedisStore(t, srv.Addr, nil)
	// The probe is out of the picture: only the restock broadcast can clear the flags.
	g1 := startGuard(t, s1, admission.GuardOptions{ProbeInterval: time.Hour})
	g2 := startGuard(t, s2, admission.GuardOptions{ProbeInterval: time.Hour})

	mustDefine(t, s3, openAt(time.Now(), "phone-1001", 2, 1))
	var resv []string
	for i, g := range []*admission.Guard{g1, g2} {
		d := mustAdmit(t, g, "phone-1001", "buyer-"+strconv.Itoa(i), 1, "r")
		if d.Outcome != admission.Won {
			t.Fatalf("buyer %d = %+v", i, d)
		}
		resv = append(resv, d.ReservationID)
	}
	for _, g := range []*admission.Guard{g1, g2} {
		if d := mustAdmit(t, g, "phone-1001", "late", 1, "r"); d.Outcome != admission.SoldOut || !g.SoldOut("phone-1001") {
			t.Fatalf("first rejection = %+v, flag %v", d, g.SoldOut("phone-1001"))
		}
	}
	if n1.n.Load() == 0 || n2.n.Load() == 0 {
		t.Fatal("the command counters saw nothing: the hook is not counting")
	}
	// Each guard loads the held wins' request ids once, in the background; after that nothing
	// reaches Redis, not even a keyed request (half of them here) whose key is no held win's.
	waitHeld(t, g1, "phone-1001")
	waitHeld(t, g2, "phone-1001")

	before1, before2 := n1.n.Load(), n2.n.Load()
	for i := range 100 {
		g := g1
		if i%2 == 1 {
			g = g2
		}
		r := admission.Request{Activity: "phone-1001", User: "u" + strconv.Itoa(i), Qty: 1, RequestID: "k" + strconv.Itoa(i), MayReplay: i%4 < 2}
		if d, err := g.Admit(context.Background(), r); err != nil || d.Outcome != admission.SoldOut {
			t.Fatalf("rejection %d = %+v, %v", i, d, err)
		}
	}
	if c1, c2 := n1.n.Load()-before1, n2.n.Load()-before2; c1 != 0 || c2 != 0 {
		t.Errorf("100 sold-out rejections sent %d + %d Redis commands, want 0", c1, c2)
	}
	// A winner's keyed retry on the other node still gets its win back from Redis.
	if d, err := g1.Admit(context.Background(), admission.Request{Activity: "phone-1001", User: "buyer-1", Qty: 1, RequestID: "r", MayReplay: true}); err != nil || !d.Replayed || d.ReservationID != resv[1] {
		t.Errorf("winner's retry = %+v, %v; want its win replayed", d, err)
	}

	// The order backend of a third process cancels both orders.
	for _, id := range resv {
		if ok, err := s3.Release(context.Background(), "phone-1001", id); !ok || err != nil {
			t.Fatalf("release %s = %v, %v", id, ok, err)
		}
	}
	eventually(t, time.Second, "both guards hear the restock", func() bool {
		return !g1.SoldOut("phone-1001") && !g2.SoldOut("phone-1001")
	})
	for i, g := range []*admission.Guard{g1, g2} {
		if d := mustAdmit(t, g, "phone-1001", "after-"+strconv.Itoa(i), 1, "r"); d.Outcome != admission.Won {
			t.Errorf("guard %d after the restock = %+v", i+1, d)
		}
	}
}

// A killed redis-server trips the breaker: admission fails closed with ErrBusy, nothing is
// admitted, and after the restart admission resumes without intervention.
func TestGuardRedisBreakerKilledServer(t *testing.T) {
	srv := testsrv.StartRedis(t, testsrv.WithAOF("always")) // the sale survives the restart
	store, _ := guardRedisStore(t, srv.Addr, func(o *redis.Options) {
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = time.Second
		o.MaxRetries = 1
		o.MaxRetryBackoff = 20 * time.Millisecond
	})
	var log admissiontest.BreakerLog
	g := startGuard(t, store, admission.GuardOptions{ConsecutiveFailures: 3, OpenTimeout: 200 * time.Millisecond, OnStateChange: log.Hook})
	ctx := context.Background()
	mustDefine(t, g, openAt(time.Now(), "a1", 1000, 1))
	user := 0
	admit := func() (admission.Decision, error) {
		user++
		return g.Admit(ctx, admission.Request{Activity: "a1", User: "u" + strconv.Itoa(user), Qty: 1, RequestID: "r"})
	}
	wins := 0
	if d, err := admit(); err != nil || d.Outcome != admission.Won {
		t.Fatalf("admission before the kill = %+v, %v", d, err)
	}
	wins++

	srv.Kill()
	eventually(t, 10*time.Second, "the breaker opens", func() bool {
		d, err := admit()
		if err == nil || d.Outcome == admission.Won {
			t.Fatalf("admission with redis down = %+v, %v", d, err)
		}
		if !errors.Is(err, admission.ErrBusy) {
			t.Fatalf("admission with redis down: %v, want ErrBusy", err)
		}
		return g.BreakerState() == gobreaker.StateOpen
	})
	if _, err := admit(); !errors.Is(err, admission.ErrBusy) || !errors.Is(err, gobreaker.ErrOpenState) {
		t.Errorf("admission with the breaker open: %v", err)
	}

	srv.Restart()
	eventually(t, 15*time.Second, "admission resumes after the restart", func() bool {
		d, err := admit()
		if err != nil && !errors.Is(err, admission.ErrBusy) {
			t.Fatalf("admission during recovery: %v, want ErrBusy or a win", err)
		}
		if err == nil && d.Outcome != admission.Won {
			t.Fatalf("admission after restart = %+v", d)
		}
		return err == nil
	})
	wins++
	if st := g.BreakerState(); st != gobreaker.StateClosed {
		t.Errorf("breaker %v after recovery, want closed", st)
	}
	if n := mustRemaining(t, g, "a1"); n != 1000-int64(wins) {
		t.Errorf("remaining %d after %d wins: something was admitted while the breaker was open", n, wins)
	}
	t.Logf("breaker transitions: %s", log.String())
}

// TestGuardRedisAdmitTimeout pauses the server (SIGSTOP): with AdmitTimeout far below the client's
// read timeout, each stalled Admit ends with ErrBusy wrapping the expired deadline, the expiries
// open the breaker, and then calls fail without being sent. After SIGCONT the calls that reached
// the server are decided, and admission resumes.
func TestGuardRedisAdmitTimeout(t *testing.T) {
	srv := testsrv.StartRedis(t)
	store, counter := guardRedisStore(t, srv.Addr, func(o *redis.Options) {
		o.ReadTimeout = time.Minute // only AdmitTimeout can end a stalled call
		o.MaxRetries = 0
	})
	g := startGuard(t, store, admission.GuardOptions{ConsecutiveFailures: 3, OpenTimeout: 200 * time.Millisecond, AdmitTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	mustDefine(t, g, openAt(time.Now(), "a1", 1000, 1))
	admit := func(user string) (admission.Decision, error) {
		return g.Admit(ctx, admission.Request{Activity: "a1", User: user, Qty: 1, RequestID: "r"})
	}
	if d, err := admit("warm-up"); err != nil || d.Outcome != admission.Won {
		t.Fatalf("admission before the pause = %+v, %v", d, err)
	}

	srv.Pause()
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	for i := range 3 {
		_, err := admit("stalled" + strconv.Itoa(i))
		if !errors.Is(err, admission.ErrBusy) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stalled admission %d: %v, want ErrBusy wrapping the deadline", i, err)
		}
	}
	if st := g.BreakerState(); st != gobreaker.StateOpen {
		t.Fatalf("breaker %v after 3 expired admissions, want open", st)
	}
	sent := counter.n.Load()
	if _, err := admit("refused"); !errors.Is(err, gobreaker.ErrOpenState) {
		t.Errorf("admission with the breaker open: %v", err)
	}
	if n := counter.n.Load() - sent; n != 0 {
		t.Errorf("the open breaker sent %d commands", n)
	}

	srv.Resume()
	resumed = true
	eventually(t, 10*time.Second, "admission resumes", func() bool {
		d, err := admit("after")
		if err != nil && !errors.Is(err, admission.ErrBusy) {
			t.Fatalf("admission after the pause: %v", err)
		}
		return err == nil && d.Outcome == admission.Won
	})
	if n := mustRemaining(t, g, "a1"); n > 998 {
		t.Errorf("remaining %d: want the warm-up and the later win taken", n)
	}
}

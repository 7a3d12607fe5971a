package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// Node 1 knows the activity split in 2 buckets; node 2 deletes it and defines it again, split
// otherwise or not at all, and a buyer wins there. Node 1's HeldRequests must list that win (or
// fail): an empty list with no error lets a Guard refuse the winner's retry with sold_out.
func TestRedisHeldRequestsStaleBucketCount(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s1, _ := guardRedisStore(t, srv.Addr, nil)
	s2, _ := guardRedisStore(t, srv.Addr, nil)
	ctx := context.Background()
	for _, buckets := range []int{4, 0} {
		a := openAt(time.Now(), "x", 4, 1)
		a.Buckets = 2
		mustDefine(t, s2, a)
		if _, err := s1.Remaining(ctx, "x"); err != nil { // node 1 caches the count, 2
			t.Fatal(err)
		}
		if err := s2.Delete(ctx, "x", true); err != nil {
			t.Fatal(err)
		}
		a.Buckets = buckets
		mustDefine(t, s2, a)
		d, err := s2.Admit(ctx, admission.Request{Activity: "x", User: "w", Qty: 1, RequestID: "k", MayReplay: true})
		if err != nil || d.Outcome != admission.Won {
			t.Fatalf("buy on node 2 (buckets %d) = %+v, %v", buckets, d, err)
		}
		ids, err := s1.HeldRequests(ctx, "x")
		if err != nil || len(ids) != 1 || ids[0] != "k" {
			t.Errorf("buckets 2, then %d: node 1's HeldRequests = %q, %v; want [k]", buckets, ids, err)
		}
		if err := s2.Delete(ctx, "x", true); err != nil {
			t.Fatal(err)
		}
	}
}

// Node 1 reads the held wins of an unsplit activity; between its check of the definition and the
// end of its scan, node 2 deletes the activity, defines it split in 2 buckets, and a buyer wins
// there. The scan of the old keys finds nothing, so the definition is checked again after it.
func TestRedisHeldRequestsRedefinedDuringScan(t *testing.T) {
	srv := testsrv.StartRedis(t)
	s2, _ := guardRedisStore(t, srv.Addr, nil)
	ctx := context.Background()
	a := openAt(time.Now(), "x", 4, 1)
	mustDefine(t, s2, a)
	var redefined bool
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: 3, DialTimeout: time.Second})
	client.AddHook(afterHScan(func() {
		if redefined {
			return
		}
		redefined = true
		if err := s2.Delete(ctx, "x", true); err != nil {
			t.Error(err)
		}
		a.Buckets = 2
		mustDefine(t, s2, a)
		d, err := s2.Admit(ctx, admission.Request{Activity: "x", User: "w", Qty: 1, RequestID: "k", MayReplay: true})
		if err != nil || d.Outcome != admission.Won {
			t.Errorf("buy on node 2 = %+v, %v", d, err)
		}
	}))
	s1, err := New(client, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s1.Close() })
	ids, err := s1.HeldRequests(ctx, "x")
	if !redefined {
		t.Fatal("no HSCAN ran: the test redefined nothing")
	}
	if err != nil || len(ids) != 1 || ids[0] != "k" {
		t.Errorf("HeldRequests across the redefinition = %q, %v; want [k]", ids, err)
	}
}

// afterHScan is a go-redis hook that calls fn after each HSCAN's reply (on the caller's goroutine).
type afterHScan func()

func (h afterHScan) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h afterHScan) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h afterHScan) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "hscan" {
			h()
		}
		return err
	}
}

package redisstore

import (
	"context"
	"testing"
	"time"

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

//go:build !race

package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisAdmitWithinAllocations: AdmitWithin, grouped or not (AdmitBatch 1), allocates about
// what Admit does, which tells that it waits with the call's pooled timer rather than a context
// of its own. The race detector allocates on its own.
func TestRedisAdmitWithinAllocations(t *testing.T) {
	srv := testsrv.StartRedis(t)
	for name, opts := range map[string]redisstore.Options{"grouped": {}, "batch 1": {AdmitBatch: 1}} {
		t.Run(name, func(t *testing.T) {
			opts.KeyPrefix = "al" + strconv.Itoa(opts.AdmitBatch)
			testRedisAdmitWithinAllocations(t, srv, opts)
		})
	}
}

func testRedisAdmitWithinAllocations(t *testing.T, srv *testsrv.Redis, opts redisstore.Options) {
	s, _ := redisTestStore(t, srv.Addr, opts, nil)
	redisDefine(t, s, redisOpen("al", 1_000_000, 1))
	ctx := context.Background()
	i := 0
	next := func() admission.Request {
		i++
		u := "u" + strconv.Itoa(i) // the user's strings are made here, in both measures alike
		return admission.Request{Activity: "al", User: u, Qty: 1, RequestID: u}
	}
	measure := func(admit func(admission.Request) (admission.Decision, error)) float64 {
		return testing.AllocsPerRun(300, func() {
			if d, err := admit(next()); err != nil || d.Outcome != admission.Won {
				t.Fatalf("admit: %+v, %v", d, err)
			}
		})
	}
	plain := measure(func(r admission.Request) (admission.Decision, error) { return s.Admit(ctx, r) })
	within := measure(func(r admission.Request) (admission.Decision, error) { return s.AdmitWithin(ctx, r, time.Minute) })
	// A context per call would be six more; one of slack (seen: 17 and 18, with no allocation in
	// AdmitWithin's own profile).
	if within > plain+1 {
		t.Errorf("AdmitWithin allocates %.1f a call, Admit %.1f: want no context per call", within, plain)
	}
	t.Logf("allocations a win: Admit %.1f, AdmitWithin %.1f", plain, within)
}

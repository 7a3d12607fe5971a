package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisAdmitWithin: AdmitWithin, grouped or not (AdmitBatch 1), ends a call the server does
// not answer once its timeout passes (the call's pooled timer), with an error wrapping
// context.DeadlineExceeded, although the client's read would wait a minute. After the server
// resumes, calls that reuse the pooled calls whose timers fired are not ended by an earlier
// expiry, and every buyer wins once.
func TestRedisAdmitWithin(t *testing.T) {
	for name, opts := range map[string]redisstore.Options{
		"grouped":                     {},
		"grouped, one call in flight": {AdmitInFlight: 1},
		"batch 1":                     {AdmitBatch: 1},
	} {
		t.Run(name, func(t *testing.T) {
			srv := testsrv.StartRedis(t)
			s, _ := redisTestStore(t, srv.Addr, opts, func(o *redis.Options) {
				o.ReadTimeout = time.Minute // only the timeout can end a stalled call
				o.MaxRetries = 0
			})
			redisDefine(t, s, redisOpen("w", 1000, 1))
			ctx := context.Background()
			req := func(user string) admission.Request {
				return admission.Request{Activity: "w", User: user, Qty: 1, RequestID: "r-" + user}
			}
			if d, err := s.AdmitWithin(ctx, req("warm"), 10*time.Second); err != nil || d.Outcome != admission.Won {
				t.Fatalf("before the pause: %+v, %v", d, err)
			}

			srv.Pause()
			resumed := false
			defer func() {
				if !resumed {
					srv.Resume()
				}
			}()
			const stalled, timeout = 8, 150 * time.Millisecond
			var wg sync.WaitGroup
			for i := range stalled {
				wg.Go(func() {
					began := time.Now()
					_, err := s.AdmitWithin(ctx, req("stalled"+strconv.Itoa(i)), timeout)
					if took := time.Since(began); !errors.Is(err, context.DeadlineExceeded) || took < timeout || took > 3*time.Second {
						t.Errorf("stalled call %d: %v after %s; want the deadline after %s", i, err, took, timeout)
					}
				})
			}
			wg.Wait()
			srv.Resume()
			resumed = true

			// Calls sent before the pause may still be decided once the server runs again; the
			// pooled calls are reused now, with a long timeout that must not fire.
			for i := range 64 {
				wg.Go(func() {
					user := "after" + strconv.Itoa(i)
					d, err := s.AdmitWithin(ctx, req(user), 30*time.Second)
					if err != nil || d.Outcome != admission.Won || d.Replayed {
						t.Errorf("%s after the pause: %+v, %v", user, d, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

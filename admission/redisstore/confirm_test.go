package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/redisclient"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// scriptMarks records, for every script the client runs, alone or in a pipeline (admissions),
// whether its context asks the Cluster monitor to confirm its answer (redisclient.Delivers).
type scriptMarks struct {
	mu    sync.Mutex
	marks []bool
}

func (h *scriptMarks) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptMarks) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.mu.Lock()
			h.marks = append(h.marks, redisclient.Delivers(ctx, cmd))
			h.mu.Unlock()
		}
		return err
	}
}

func (h *scriptMarks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.mu.Lock()
		for _, cmd := range cmds {
			if n := cmd.Name(); n == "evalsha" || n == "eval" {
				h.marks = append(h.marks, redisclient.Delivers(ctx, cmd))
			}
		}
		h.mu.Unlock()
		return err
	}
}

// take returns the marks recorded since the last take.
func (h *scriptMarks) take() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.marks
	h.marks = nil
	return m
}

// TestRedisDeliveryConfirmed: the wins queue's new entries come from a script (read_new.lua), not
// an XREADGROUP; its answer, when it delivers wins, must be confirmed by the Cluster monitor as an
// XREADGROUP's is (docs/failover.md), so the store marks its context, and only a delivering answer
// counts: an admission or a read that found nothing is taken as it comes.
func TestRedisDeliveryConfirmed(t *testing.T) {
	srv := testsrv.StartRedis(t)
	hook := &scriptMarks{}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	client.AddHook(hook)
	s, err := redisstore.New(client, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ctx := context.Background()
	redisDefine(t, s, redisOpen("dc", 10, 1))
	if err := s.EnsureGroup(ctx, "dc", "g"); err != nil {
		t.Fatal(err)
	}
	hook.take()
	for _, u := range []string{"u1", "u2"} {
		if d, err := s.Admit(ctx, admission.Request{Activity: "dc", User: u, Qty: 1, RequestID: "r-" + u}); err != nil || d.Outcome != admission.Won {
			t.Fatalf("admit %s: %+v, %v", u, d, err)
		}
	}
	if m := hook.take(); len(m) == 0 || anyMarked(m) {
		t.Errorf("admissions' scripts: marks %v, want none marked", m)
	}
	wins, err := s.ReadGroup(ctx, "dc", "g", "c", 10, 0, false)
	if err != nil || len(wins) != 2 {
		t.Fatalf("read: %d wins, %v", len(wins), err)
	}
	if m := hook.take(); len(m) == 0 || !m[len(m)-1] {
		t.Errorf("the read that delivered 2 wins: marks %v, want its script marked", m)
	}
	wins, err = s.ReadGroup(ctx, "dc", "g", "c", 10, time.Millisecond, false)
	if err != nil || len(wins) != 0 {
		t.Fatalf("second read: %d wins, %v", len(wins), err)
	}
	if m := hook.take(); len(m) == 0 || anyMarked(m) {
		t.Errorf("a read that delivered nothing: marks %v, want none marked", m)
	}
}

func anyMarked(m []bool) bool {
	for _, x := range m {
		if x {
			return true
		}
	}
	return false
}

package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/waitroom"
	"github.com/caddy-seckill/caddy-seckill/waitroom/linetest"
)

func TestRedisLineConformance(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	linetest.Run(t, func(t *testing.T) linetest.Store {
		s, _ := redisTestStore(t, srv.Addr, redisstore.Options{KeyPrefix: fmt.Sprintf("line%d", n.Add(1))}, nil)
		return s
	})
}

// TestRedisLineFailover: a line the replica has (WAIT confirmed it) survives the master's death
// and the replica's promotion whole: every place, the lottery's order and the next late joiner's
// turn, which comes after everyone's.
func TestRedisLineFailover(t *testing.T) {
	ctx := context.Background()
	master := testsrv.StartRedis(t)
	replica := testsrv.StartReplica(t, master)
	s, _ := redisTestStore(t, master.Addr, redisstore.Options{}, nil)
	now := time.Now()
	a := admission.Activity{ID: "fo", Stock: 5, Limit: 1, Start: now.Add(time.Hour), End: now.Add(2 * time.Hour), PayWithin: time.Minute}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	const users = 40
	hour := float64(time.Hour / time.Millisecond)
	for i := range users {
		if _, err := s.Join(ctx, "fo", fmt.Sprint("u", i), waitroom.Terms{Draw: waitroom.Draw("fo", fmt.Sprint("u", i), "salt"), IntervalMS: hour, SessionMS: 60_000}); err != nil {
			t.Fatal(err)
		}
	}
	a.Start = now.Add(-time.Second) // the lottery is drawn
	if _, err := s.Define(ctx, a, true); err != nil {
		t.Fatal(err)
	}
	late, err := s.Join(ctx, "fo", "late", waitroom.Terms{Draw: 0.5, IntervalMS: hour, SessionMS: 60_000})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]int64{}
	for i := range users {
		u := fmt.Sprint("u", i)
		p, err := s.Place(ctx, "fo", u)
		if err != nil {
			t.Fatal(err)
		}
		before[u] = p.Rank
	}
	if n, err := master.Do("WAIT", "1", "5000"); err != nil || n != "1" {
		t.Fatalf("WAIT: %q, %v", n, err)
	}
	master.Kill()
	if err := replica.Promote(); err != nil {
		t.Fatal(err)
	}
	s2, _ := redisTestStore(t, replica.Addr, redisstore.Options{}, nil)
	for u, rank := range before {
		p, err := s2.Join(ctx, "fo", u, waitroom.Terms{Draw: 0.99, IntervalMS: hour, SessionMS: 60_000})
		if err != nil || p.Joined || p.Rank != rank {
			t.Fatalf("%s after the failover: %+v, %v; want its rank %d kept", u, p, err, rank)
		}
	}
	p, err := s2.Join(ctx, "fo", "later", waitroom.Terms{Draw: 0.5, IntervalMS: hour, SessionMS: 60_000})
	if err != nil || p.Rank != users+1 || p.Offset != late.Offset+hour {
		t.Fatalf("the next late joiner after the failover: %+v, %v; want rank %d, offset %v", p, err, users+1, late.Offset+hour)
	}
}

// TestRedisLineSplitActivity: an activity split into buckets keeps its line in the parent's slot,
// and deleting the activity deletes the line.
func TestRedisLineSplitActivity(t *testing.T) {
	ctx := context.Background()
	srv := testsrv.StartRedis(t)
	s, _ := redisTestStore(t, srv.Addr, redisstore.Options{}, nil)
	now := time.Now()
	a := admission.Activity{ID: "split", Stock: 10, Limit: 1, Start: now.Add(-time.Minute), End: now.Add(time.Hour), PayWithin: time.Minute, Buckets: 2}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	p, err := s.Join(ctx, "split", "u", waitroom.Terms{Draw: 0.5, IntervalMS: 1000, SessionMS: 60_000})
	if err != nil || !p.Joined || p.Rank != 0 {
		t.Fatalf("join a split activity: %+v, %v", p, err)
	}
	if err := s.Delete(ctx, "split", true); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Define(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Place(ctx, "split", "u"); !errors.Is(err, waitroom.ErrNotInLine) {
		t.Fatalf("place after the split activity was deleted and defined again: %v, want ErrNotInLine", err)
	}
}

package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"path/filepath"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestReplicasAckFlag: -redis-replicas-ack reaches the store, so the backend's releases wait for
// the replicas; a value out of range is refused when the store is opened.
func TestReplicasAckFlag(t *testing.T) {
	master := testsrv.StartRedis(t)
	testsrv.StartReplica(t, master)
	open := func(ack string) (admission.Store, error) {
		var c common
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.register(fs)
		if err := fs.Parse([]string{"-redis", master.Addr, "-db", "sqlite:" + filepath.Join(t.TempDir(), "o.db"), "-redis-replicas-ack", ack}); err != nil {
			t.Fatal(err)
		}
		store, repo, err := c.open(context.Background())
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = store.Close(); _ = repo.Close() })
		return store, nil
	}
	store, err := open("1")
	if err != nil {
		t.Fatal(err)
	}
	if rs, ok := store.(*redisstore.Store); !ok || !rs.ReplicasAckEnabled() {
		t.Fatalf("store %T does not wait for replicas", store)
	}
	if _, err := open("17"); !errors.Is(err, admission.ErrBadInput) {
		t.Fatalf("-redis-replicas-ack 17: %v, want ErrBadInput", err)
	}
}

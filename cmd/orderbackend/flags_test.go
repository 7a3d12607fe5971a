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
	"github.com/caddy-seckill/caddy-seckill/money"
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

// TestPriceFlags: -price and -title fill the listings; a bad or repeated one is refused.
func TestPriceFlags(t *testing.T) {
	parse := func(args ...string) (listings, error) {
		l := listings{}
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		l.register(fs)
		return l, fs.Parse(args)
	}
	l, err := parse("-price", "a=199.00:usd", "-title", "a=Phone X", "-price", "b=500:JPY")
	if err != nil || l.listing("a").Price != (money.Price{Amount: 19900, Currency: "USD"}) || l.listing("a").Title != "Phone X" ||
		l.listing("b").Price != (money.Price{Amount: 500, Currency: "JPY"}) || !l.listing("c").Price.IsZero() {
		t.Fatalf("listings = %+v, %v", l, err)
	}
	for _, bad := range [][]string{
		{"-price", "a=199.00"}, {"-price", "a=1.999:USD"}, {"-price", "a=1:XXX"}, {"-price", "=1:USD"},
		{"-price", "a=1:USD", "-price", "a=2:USD"}, {"-title", "a="}, {"-title", "a=x", "-title", "a=y"},
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

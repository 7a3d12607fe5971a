package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestRedisFailoverLoss measures what a Redis failover loses of the wins the store answered, with
// and without Options.ReplicasAck, and with the master's AOF off, everysec and always.
//
// A private master replicates to a private replica through a proxy. Half of the buyers buy while
// the link flows; then the link is held (the replication stream stops reaching the replica, as
// when the network between them lags or is partitioned, or the replica falls behind) and the
// other half buy; then the master is SIGKILLed, the link is cut with what it held, and the
// replica is promoted (REPLICAOF NO ONE), as Sentinel or an operator does. Every win that was
// answered (a 202 at the edge) is then looked up on the new master.
//
// Expected, and asserted: without replicas_ack every win answered while the link was held is
// lost (the item sells again), whatever the AOF setting; with replicas_ack 1 none is, because
// those buyers were answered ErrNotReplicated (503 busy) instead. The old master's AOF keeps the
// lost wins (all of them with always, maybe only some with everysec), but a failover does not
// read it: when the old master comes back and rejoins as a replica of the new one, it resyncs
// from it and they are gone (checked too).
//
// A win is on a server when its reservation E-k is win k of entry E of the stream, for its buyer,
// and a record of the buyer's :users field (what a replay and a poll read).
//
// SECKILL_CHAOS=full runs ten times the buyers.
func TestRedisFailoverLoss(t *testing.T) {
	buyers := 200
	if os.Getenv("SECKILL_CHAOS") == "full" {
		buyers = 2000
	}
	for _, aof := range []string{"off", "everysec", "always"} {
		for _, ack := range []int{0, 1} {
			t.Run(fmt.Sprintf("aof_%s/replicas_ack_%d", aof, ack), func(t *testing.T) {
				r := redisFailover(t, aof, ack, buyers)
				t.Logf("aof %s, replicas_ack %d: %d buyers; %d answered won (%d before the hold, %d during it), "+
					"%d of them lost on the promoted replica; %d answered not replicated (%d before the hold; %d of their wins on the replica); "+
					"old master's AOF kept %d of the lost wins, %d after rejoining as a replica",
					aof, ack, buyers, r.won[0]+r.won[1], r.won[0], r.won[1], r.lost, r.unconfirmed[0]+r.unconfirmed[1], r.unconfirmed[0], r.unconfirmedKept, r.aofKept, r.rejoinedKept)
				if ack == 0 {
					if r.won[1] == 0 || r.lost < r.won[1] {
						t.Errorf("without replicas_ack: %d wins answered during the hold, %d lost; want all of them lost", r.won[1], r.lost)
					}
				} else {
					if r.lost != 0 {
						t.Errorf("with replicas_ack: %d answered wins lost, want 0", r.lost)
					}
					// Before the hold a slow acknowledgement on a loaded machine may refuse a
					// few; during it every buyer must be refused.
					if r.won[1] != 0 || r.unconfirmed[1] != buyers-buyers/2 {
						t.Errorf("with replicas_ack: %d wins answered during the hold and %d not replicated, want 0 and %d", r.won[1], r.unconfirmed[1], buyers-buyers/2)
					}
				}
				// With everysec a SIGKILL may cost the AOF too: while a background fsync is slow,
				// Redis postpones writing its AOF buffer (up to 2 s), and a killed process loses
				// the buffer. With always, every answered write is in the file.
				if aof == "always" && r.aofKept != r.lost {
					t.Errorf("old master: its AOF (always) kept %d of %d lost wins, want all", r.aofKept, r.lost)
				}
				if r.rejoinedKept != 0 {
					t.Errorf("old master: %d lost wins still there after rejoining as a replica, want 0", r.rejoinedKept)
				}
			})
		}
	}
}

type failoverResult struct {
	won             [2]int // answered wins before and during the hold
	lost            int    // answered wins missing on the promoted replica
	unconfirmed     [2]int // ErrNotReplicated answers before and during the hold
	unconfirmedKept int    // ... whose win the promoted replica has
	aofKept         int    // lost wins the restarted old master has from its AOF
	rejoinedKept    int    // ... after it rejoined as a replica of the new master
}

// win is an answered win: its buyer and reservation id.
type win struct{ user, resv string }

func redisFailover(t *testing.T, aof string, ack, buyers int) failoverResult {
	ctx := context.Background()
	var opts []testsrv.RedisOption
	if aof != "off" {
		opts = append(opts, testsrv.WithAOF(aof))
	}
	master := testsrv.StartRedis(t, opts...)
	link := testsrv.StartProxy(t, master.Addr)
	replica := testsrv.StartReplicaVia(t, master, link)
	var o redisstore.Options
	if ack > 0 {
		// Far above a replica's acknowledgement on a loaded machine: while the link flows, no
		// buyer may be refused for a slow one.
		o.ReplicasAck, o.ReplicasAckTimeout = ack, time.Second
	}
	s, _ := redisTestStore(t, master.Addr, o, func(o *redis.Options) { o.PoolSize = 16 })
	act := redisDefine(t, s, redisOpen("fo", int64(buyers), 1))
	waitForKey(t, replica, "seckill:{"+act.ID+"}:meta")

	var (
		res   failoverResult
		mu    sync.Mutex
		resvs []win // answered wins
		unack []win // ErrNotReplicated answers
	)
	buy := func(phase, from, to int) {
		var wg sync.WaitGroup
		for u := from; u < to; u++ {
			wg.Go(func() {
				d, err := s.Admit(ctx, admission.Request{Activity: act.ID, User: fmt.Sprintf("u%d", u), Qty: 1, RequestID: "r"})
				mu.Lock()
				defer mu.Unlock()
				var re *admission.ReplicationError
				switch {
				case err == nil && d.Outcome == admission.Won:
					res.won[phase]++
					resvs = append(resvs, win{fmt.Sprintf("u%d", u), d.ReservationID})
				case errors.As(err, &re):
					res.unconfirmed[phase]++
					unack = append(unack, win{fmt.Sprintf("u%d", u), re.ReservationID})
				default:
					t.Errorf("buyer u%d: %+v, %v", u, d, err)
				}
			})
		}
		wg.Wait()
	}
	buy(0, 0, buyers/2)
	link.Hold()
	buy(1, buyers/2, buyers)
	master.Kill()
	link.Close() // the stream it held dies with the master's connection
	if err := replica.Promote(); err != nil {
		t.Fatal(err)
	}
	has := func(r *testsrv.Redis, w win) bool { return winOn(t, r, act.ID, w) }
	var lost []win
	for _, w := range resvs {
		if !has(replica, w) {
			lost = append(lost, w)
		}
	}
	res.lost = len(lost)
	for _, w := range unack {
		if has(replica, w) {
			res.unconfirmedKept++
		}
	}
	// The promoted replica never sold more than the stock.
	if n := queuedOn(t, replica, act.ID); n > buyers {
		t.Errorf("promoted replica's wins queue holds %d wins, above the stock %d", n, buyers)
	}
	if aof == "off" {
		return res
	}

	// The old master comes back from its AOF ...
	master.Restart()
	for _, w := range lost {
		if has(master, w) {
			res.aofKept++
		}
	}
	// ... and rejoins as a replica of the new master, as Sentinel makes it: a full resync from
	// the new master replaces its data.
	host, port, _ := net.SplitHostPort(replica.Addr)
	if _, err := replica.Do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatal(err)
	}
	if _, err := master.Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	if err := master.WaitLinkUp(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, w := range lost {
		if has(master, w) {
			res.rejoinedKept++
		}
	}
	// After the sync the old master rewrites its AOF, and refuses to stop (SIGTERM) until done.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if p, err := master.Info("persistence"); err == nil && p["aof_rewrite_in_progress"] == "0" && p["aof_rewrite_scheduled"] == "0" {
			break
		}
	}
	return res
}

// winOn reports whether server r holds the win w of activity act: its reservation E-k is win k
// of entry E of :orders, for w's buyer, and a record of the buyer's :users field ("<length of the
// request id>:<request id><reservation>;", the request id "r" here). The check is a read-only
// script, so it runs on a replica as well.
func winOn(t *testing.T, r *testsrv.Redis, act string, w win) bool {
	t.Helper()
	keys := "seckill:{" + act + "}"
	i := strings.LastIndexByte(w.resv, '-')
	if i < 0 {
		t.Fatalf("reservation %q is not a win id E-k", w.resv)
	}
	const script = `
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e ~= 1 then return 0 end
local f, k = e[1][2], tonumber(ARGV[2])
if #f < 4 + 2 * k or f[3 + 2 * k] ~= ARGV[3] then return 0 end
local u = redis.call('HGET', KEYS[2], ARGV[3])
if not u or not string.find(u, ARGV[4], 1, true) then return 0 end
return 1`
	v, err := r.Do("EVAL_RO", script, "2", keys+":orders", keys+":users", w.resv[:i], w.resv[i+1:], w.user, "1:r"+w.resv+";")
	if err != nil {
		t.Fatalf("read win %s of %s on %s: %v", w.resv, w.user, r.Addr, err)
	}
	return v == "1"
}

// queuedOn is how many wins server r's wins queue of activity act holds: the wins of its entries
// (read raw, not from the :meta counter the scripts keep).
func queuedOn(t *testing.T, r *testsrv.Redis, act string) int {
	t.Helper()
	key := "seckill:{" + act + "}:orders"
	const script = `
local n = 0
for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do n = n + (#e[2] - 4) / 2 end
return n`
	v, err := r.Do("EVAL_RO", script, "1", key)
	if err != nil {
		t.Fatalf("count the wins of %s on %s: %v", key, r.Addr, err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("count the wins of %s on %s: %q", key, r.Addr, v)
	}
	return n
}

// waitForKey waits until key exists on r (a replica catching up).
func waitForKey(t *testing.T, r *testsrv.Redis, key string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if v, err := r.Do("EXISTS", key); err == nil && v == "1" {
			return
		}
	}
	t.Fatalf("%s never reached the replica %s", key, r.Addr)
}

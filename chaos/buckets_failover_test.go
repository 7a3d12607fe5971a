package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
)

// TestClusterBucketsMasterKilled is scenario 11: scenario 7 with the activity's stock split into
// 8 buckets (activity { buckets 8 }) spread over the Cluster's three masters. Mid-sale the master
// holding the most buckets is killed with SIGKILL while buys, pulls into dry buckets and the
// rebalancer's transfers are under way. Buyers of the other buckets go on winning; its replica is
// promoted, and the buyers of its buckets win again within a few seconds of the promotion; the
// sale goes on to the end. Asserts: every win acknowledged before the kill is in its bucket's
// queue on the new master; then the common end (no win lost, none twice, nobody above the limit,
// reconcile); no undersell: the sale sold out — the store's remaining is 0 and exactly the stock
// was won; then the status, a winner's result and the restock path on both gateways. Each bucket
// has its own :users, :orders and :acked, and a win acknowledged before the kill is win k of an
// entry of its bucket's stream on the new master (reservation "E-k.<bucket>"). Entries of several
// wins are logged, not required: group admission batches per bucket, and 32 buyers over 8 buckets
// and two gateways rarely queue more than the two calls a gateway keeps in flight for one bucket
// (0–3 such entries per sale).
func TestClusterBucketsMasterKilled(t *testing.T) {
	m := currentMode()
	id := "buckets-failover"
	act := newActivity(id, m.stock, 2)
	act.buckets = 8
	e := newEnvOn(t, act, cluster)
	gws := []*gateway{e.startGateway("gateway-1"), e.startGateway("gateway-2")}
	be := e.startBackend("backend", 30*time.Second)

	d := newDriver(t, act.id, gws...)
	d.retryCap = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wait := d.start(ctx, makeBuyers(t, "bk", m.users, len(gws)), m.conc)

	for round := 1; round <= m.rounds; round++ {
		n := int64(round) * m.stock / int64(m.rounds+2)
		d.waitHeld(t, d.holdAt(n), n)
		d.burst(m.conc / 2)
		old, key, held := e.busiestBucketMaster()
		// Buckets are independent shards: the buyers whose home bucket is on another master go
		// on winning; those of the killed master's buckets wait for the promotion.
		onOld := map[int]bool{}
		for i, k := range e.streamKeys() {
			onOld[i] = e.cluster.MasterOf(k) == old
		}
		old.Kill()
		failed := time.Now()
		acked := d.wins()
		d.gate.release()

		promoted, took := e.cluster.WaitFailover(old, key, time.Minute)
		firstAdmit := waitAdmission(t, d, failed, time.Minute)
		var firstOnOld time.Duration
		waitFor(t, "a 202 from a bucket of the killed master", time.Minute, func() bool {
			for _, a := range d.snapshot() {
				if a.call == "buy" && a.status == http.StatusAccepted && a.sent.After(failed) &&
					onOld[admission.HomeBucket(a.user, act.buckets)] {
					firstOnOld = a.got.Sub(failed)
					return true
				}
			}
			return false
		})
		d.gate.hold()
		outage := d.within(failed, failed.Add(took))
		wonMeanwhile := count(outage, func(a attempt) bool { return a.call == "buy" && a.status == http.StatusAccepted })
		busyMeanwhile := count(outage, func(a attempt) bool { return a.call == "buy" && a.status == http.StatusServiceUnavailable })
		if firstOnOld > took+recoveryMargin {
			t.Errorf("round %d: first admission from the killed master's buckets %s after the kill, %s after the promotion (want within %s)",
				round, firstOnOld.Round(time.Millisecond), (firstOnOld - took).Round(time.Millisecond), recoveryMargin)
		}
		// The test's client finds the other buckets of the old master on the new one too.
		waitFor(t, "every bucket's queue readable after the failover", time.Minute, func() bool {
			for _, k := range e.streamKeys() {
				if err := e.rdb.XLen(context.Background(), k).Err(); err != nil {
					return false
				}
			}
			return true
		})
		if missing := e.missingFromStream(acked); len(missing) > 0 {
			t.Errorf("round %d: %d of %d wins acknowledged before the kill are not in their buckets' queues: %v",
				round, len(missing), len(acked), missing)
		}
		old.Restart()
		e.cluster.WaitHealthy()
		if e.cluster.MasterOf(key) != promoted {
			t.Errorf("round %d: the slot of %s went back to %s", round, key, old.Addr)
		}
		d.gate.release()
		t.Logf("round %d: killed %s holding %d of %d buckets at %d wins acknowledged; promotion %s after the kill; "+
			"first admission %s after the kill (other buckets), first from the killed master's buckets %s after it (%s after the promotion); "+
			"until the promotion %d buys won and %d were answered 503 busy",
			round, old.Addr, held, act.buckets, len(acked), took.Round(time.Millisecond), firstAdmit.Round(time.Millisecond),
			firstOnOld.Round(time.Millisecond), (firstOnOld - took).Round(time.Millisecond), wonMeanwhile, busyMeanwhile)
	}
	wait()
	t.Logf("answers: %s", summary(d.snapshot()))
	wins, entries, multi := e.multiWinEntries()
	t.Logf("the sale's %d wins are %d entries, %d of them with 2+ wins", wins, entries, multi)
	rep, _ := e.verify(d)

	// Never undersell: once every buyer had a definite answer, every bucket is empty.
	if left := e.remaining(); left != 0 || rep.StoreRemaining != 0 {
		t.Errorf("undersold: %d items left in the store after every buyer was answered (reconcile read %d)", left, rep.StoreRemaining)
	}
	if won := int64(len(d.wins())); won != act.stock {
		t.Errorf("%d buy intents won, stock %d", won, act.stock)
	}
	for _, g := range gws {
		t.Logf("%s: %s", g.name, bucketCounters(t, g))
	}
	e.checkPathsAfterFailover(gws, be, d)
}

// busiestBucketMaster returns the master holding the most of the activity's buckets, one of its
// buckets' queue keys (to follow its slot through the failover) and how many buckets it holds.
func (e *env) busiestBucketMaster() (*testsrv.Redis, string, int) {
	e.t.Helper()
	held := map[*testsrv.Redis][]string{}
	var busiest *testsrv.Redis
	for _, key := range e.streamKeys() {
		m := e.cluster.MasterOf(key)
		held[m] = append(held[m], key)
		if busiest == nil || len(held[m]) > len(held[busiest]) {
			busiest = m
		}
	}
	if len(held) < 2 {
		e.t.Fatalf("the %d buckets live on %d master(s), want them spread", len(e.streamKeys()), len(held))
	}
	return busiest, held[busiest][0], len(held[busiest])
}

// bucketCounters reads the caddy_seckill_bucket_* counters from a gateway's metrics.
func bucketCounters(t *testing.T, g *gateway) string {
	t.Helper()
	hc := &http.Client{Timeout: 2 * time.Second}
	res, err := hc.Get(g.base + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer func() { _ = res.Body.Close() }()
	var out []string
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "caddy_seckill_bucket_"); ok {
			name, v, _ := strings.Cut(rest, " ")
			f, _ := strconv.ParseFloat(v, 64)
			out = append(out, fmt.Sprintf("%s %d", strings.TrimSuffix(name, "_total"), int64(f)))
		}
	}
	return strings.Join(out, ", ")
}

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/jwtauth"
)

// fault is what a failover scenario does to the master holding the activity.
type fault int

const (
	killMaster  fault = iota // SIGKILL, restarted once a replica has taken over
	pauseMaster              // SIGSTOP for the mode's pause (5 s), then SIGCONT
)

func (f fault) String() string { return [...]string{"kill", "pause"}[f] }

// recoveryMargin is how long after the promotion both gateways may take to answer from the new
// master. The watch re-reads the slot map every 250 ms and the breaker tries every 500 ms, so about
// 0.8 s is expected; the rest is for a loaded machine.
const recoveryMargin = 3 * time.Second

// TestClusterMasterKilled is scenario 7: on a Redis Cluster (3 masters + 3 replicas,
// cluster-node-timeout 2 s, AOF everysec) two gateways sell while an order backend consumes; the
// master of the activity's slot is killed with SIGKILL mid-sale. Its replica is promoted, both
// gateways admit again within a few seconds of the promotion (not the minute go-redis alone
// takes: docs/failover.md), the order backend goes on reading the wins queue on the new master,
// the old master comes back as a replica; then the common end and the paths check. Every win
// acknowledged before the kill is win k of an entry E of the promoted replica's stream, the sale
// made entries of several wins, and the consumer, the results and the restock read them on the
// new master.
func TestClusterMasterKilled(t *testing.T) { failover(t, cluster, killMaster) }

// TestSentinelMasterKilled is scenario 8: scenario 7 on Sentinel (master + replica + 3 sentinels,
// down-after-milliseconds 2 s); the old master comes back as a replica of the new one.
func TestSentinelMasterKilled(t *testing.T) { failover(t, sentinel, killMaster) }

// TestClusterMasterPaused is scenario 9: the master of the activity's slot is stopped (SIGSTOP)
// for 5 s, longer than cluster-node-timeout: its replica takes over while it sleeps, and when it
// continues it finds itself a replica. Calls it had in its socket are never answered by it: what
// waited there (admit.lua calls, the order backend's read_new.lua) must become neither a win
// answered nor an order the promoted replica lacks.
func TestClusterMasterPaused(t *testing.T) { failover(t, cluster, pauseMaster) }

// TestSentinelMasterPaused is scenario 9 on Sentinel (full run only: the short run has the
// Cluster's).
func TestSentinelMasterPaused(t *testing.T) {
	if !currentMode().full {
		t.Skip("SECKILL_CHAOS=full")
	}
	failover(t, sentinel, pauseMaster)
}

// failover runs scenarios 7–9 on topo with fault f.
func failover(t *testing.T, topo topology, f fault) {
	m := currentMode()
	id := fmt.Sprintf("failover-%s-%s", topo, f)
	act := newActivity(id, m.stock, 2)
	e := newEnvOn(t, act, topo)
	// The distributed user limit puts a Redis call in front of every path and buy call.
	e.seckillOptions = "rate_limit user 100/s burst 100 distributed"
	gws := []*gateway{e.startGateway("gateway-1"), e.startGateway("gateway-2")}
	// A third gateway only issues captchas (captcha on), for an activity nobody buys.
	cg := e.startGatewayCaptcha("gateway-captcha", "on")
	be := e.startBackend("backend", 30*time.Second) // consuming when the master fails

	d := newDriver(t, act.id, gws...)
	// Impatient buyers (100 ms after a 503): the first admission after the failover is seen
	// within 0.1 s of when it became possible.
	d.retryCap = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wait := d.start(ctx, makeBuyers(t, "fo", m.users, len(gws)), m.conc)

	for round := 1; round <= m.rounds; round++ {
		n := int64(round) * m.stock / int64(m.rounds+4)
		d.waitHeld(t, d.holdAt(n), n)
		d.burst(m.conc / 2)
		old := e.masterOfActivity()
		delivered0, err := e.delivered()
		if err != nil {
			t.Fatalf("round %d: the consumer group before the %s: %v", round, f, err)
		}
		switch f {
		case killMaster:
			old.Kill() // returns once the process is gone
		case pauseMaster:
			old.Pause()
		}
		failed := time.Now()
		acked := d.wins() // every 202 received by now was answered by the old master
		d.gate.release()

		// Each gateway reads a winner's result (a store call through its breaker) until it
		// answers: when that gateway reads from the new master.
		probes := make([]<-chan time.Duration, len(gws))
		for gw, g := range gws {
			probes[gw] = e.probeResult(g, acked, failed)
		}
		resumed := make(chan struct{})
		if f == pauseMaster { // SIGCONT on time, whatever the round is waiting for then
			time.AfterFunc(time.Until(failed.Add(m.pause)), func() { old.Resume(); close(resumed) })
		} else {
			close(resumed)
		}
		promoted, took := e.waitFailover(old)

		firstAdmit := waitAdmission(t, d, failed, time.Minute)
		// The sale stops here until the round is checked, so that there is stock for the next.
		d.gate.hold()
		if firstAdmit > took+recoveryMargin {
			t.Errorf("round %d: first admission %s after the %s, %s after the promotion (want within %s)",
				round, firstAdmit.Round(time.Millisecond), f, (firstAdmit - took).Round(time.Millisecond), recoveryMargin)
		}
		var perGateway []time.Duration
		for gw, p := range probes {
			at := <-p
			perGateway = append(perGateway, at)
			if at > took+recoveryMargin {
				t.Errorf("round %d: %s read from the new master %s after the %s, %s after the promotion (want within %s)",
					round, gws[gw].name, at.Round(time.Millisecond), f, (at - took).Round(time.Millisecond), recoveryMargin)
			}
		}
		busy := count(d.within(failed, failed.Add(firstAdmit)), func(a attempt) bool {
			return a.call == "buy" && a.status == http.StatusServiceUnavailable
		})

		// The consumer goes on reading the wins queue on the new master.
		var deliveredNow [2]uint64
		var deliveredErr error
		for began := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			if deliveredNow, deliveredErr = e.delivered(); deliveredErr == nil && after(deliveredNow, delivered0) {
				break
			}
			if time.Since(began) > time.Minute {
				pending, lag, err := e.backlog()
				t.Fatalf("round %d: the order backend read nothing new on the new master within a minute: last delivered %v (%v), before the %s %v; pending %d, lag %d (%v); queue length %d",
					round, deliveredNow, deliveredErr, f, delivered0, pending, lag, err, e.queued())
			}
		}
		// Without replicas_ack a win answered in the last milliseconds before the fault may not
		// have reached the replica (docs/failover.md): such a loss is reported, any other fails.
		missing := e.missingFromStream(acked)
		tail, holes := e.replicationTail(acked, missing, failed)
		if len(holes) > 0 {
			t.Errorf("round %d: %d of %d wins acknowledged before the %s are not in the new master's queue: %v (%s)",
				round, len(holes), len(acked), f, holes, madeBefore(holes, failed))
		}
		if len(tail) > 0 {
			if e.replicationLost == nil {
				e.replicationLost = map[string]bool{}
			}
			for _, r := range tail {
				e.replicationLost[r] = true
			}
			t.Logf("round %d: %d of %d wins acknowledged before the %s lost to asynchronous replication, the newest of their queue: %v (%s)",
				round, len(tail), len(acked), f, tail, madeBefore(tail, failed))
		}

		// The old master comes back as a replica.
		<-resumed
		if f == killMaster {
			old.Restart()
		}
		rejoin := time.Now()
		e.waitReplica(old, promoted)
		rejoined := time.Since(rejoin)
		// Captchas once the old master is a replica: a stopped master that continues answers, for
		// a moment, what a client that has not yet re-read the slot map sent it (docs/failover.md).
		captchas := e.checkCaptchas(cg, promoted, round)
		d.gate.release()
		t.Logf("round %d (%s, %s): promotion %s after the %s; first admission %s after the %s (%s after the promotion; goal: node timeout + 2 s = 4 s); "+
			"gateways reading a result from the new master after %v; %d buys answered 503 busy in between; "+
			"%d wins acknowledged before the %s, %d of them missing on the new master; old master %s back as a replica after %s; %s",
			round, topo, f, took.Round(time.Millisecond), f, firstAdmit.Round(time.Millisecond), f, (firstAdmit - took).Round(time.Millisecond),
			roundAll(perGateway), busy, len(acked), f, len(missing), old.Addr, rejoined.Round(time.Millisecond), captchas)
	}
	wait()
	t.Logf("answers: %s", summary(d.snapshot()))
	e.requireMultiWinEntries()
	e.verify(d)
	e.checkPathsAfterFailover(gws, be, d)
}

// madeBefore says how long before the fault the reservations' queue entries were made (an entry
// id's first part is the master's clock in milliseconds): a win made in the last milliseconds
// may not have reached the replica yet, which Redis does not promise without WAIT
// (docs/failover.md, "Losses per durability setting").
func madeBefore(resvs []string, fault time.Time) string {
	var ds []string
	for _, r := range resvs {
		k, ok := winOrder(r)
		if !ok {
			ds = append(ds, "?")
			continue
		}
		ds = append(ds, fault.Sub(time.UnixMilli(int64(k[0]))).Round(time.Millisecond).String())
	}
	return "made " + strings.Join(ds, ", ") + " before the fault"
}

// masterOfActivity is the server holding the activity's keys.
func (e *env) masterOfActivity() *testsrv.Redis {
	e.t.Helper()
	switch e.topo {
	case cluster:
		return e.cluster.MasterOf(e.streamKey())
	case sentinel:
		return e.sentinel.Master()
	}
	return e.redis
}

// waitFailover waits until a replica of old has taken over and returns it and how long after the
// fault that was.
func (e *env) waitFailover(old *testsrv.Redis) (*testsrv.Redis, time.Duration) {
	e.t.Helper()
	switch e.topo {
	case cluster:
		return e.cluster.WaitFailover(old, e.streamKey(), time.Minute)
	case sentinel:
		return e.sentinel.WaitFailover(old, time.Minute)
	}
	e.t.Fatal("a single redis-server has no failover")
	return nil, 0
}

// waitReplica waits until the old master, back, replicates the new one.
func (e *env) waitReplica(old, promoted *testsrv.Redis) {
	e.t.Helper()
	switch e.topo {
	case cluster:
		e.cluster.WaitHealthy()
		if e.cluster.MasterOf(e.streamKey()) != promoted {
			e.t.Errorf("the activity's slot went back to %s", old.Addr)
		}
	case sentinel:
		e.sentinel.WaitReplicaOf(old, promoted, 2*time.Minute)
	}
}

// delivered is the last queue entry the consumer group was handed (its last-delivered-id), as
// (milliseconds, sequence).
func (e *env) delivered() ([2]uint64, error) {
	gs, err := e.rdb.XInfoGroups(context.Background(), e.streamKey()).Result()
	if err != nil {
		return [2]uint64{}, err
	}
	for _, g := range gs {
		if g.Name == group {
			var id [2]uint64
			_, err := fmt.Sscanf(strings.Replace(g.LastDeliveredID, "-", " ", 1), "%d %d", &id[0], &id[1])
			return id, err
		}
	}
	return [2]uint64{}, fmt.Errorf("no consumer group %q", group)
}

func after(a, b [2]uint64) bool { return a[0] > b[0] || (a[0] == b[0] && a[1] > b[1]) }

// probeResult reads the result of one of the wins in acked on g every 50 ms from now on, and
// sends how long after from g first answered it 200 (or a minute, when it never did).
func (e *env) probeResult(g *gateway, acked map[userKey]string, from time.Time) <-chan time.Duration {
	var user string
	for k := range acked {
		user = k.user
		break
	}
	tok := mint(e.t, user)
	done := make(chan time.Duration, 1)
	go func() {
		hc := &http.Client{Timeout: 2 * time.Second}
		for time.Since(from) < time.Minute {
			req, _ := http.NewRequest(http.MethodGet, g.base+"/seckill/"+e.act.id+"/result", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if res, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, res.Body)
				_ = res.Body.Close()
				if res.StatusCode == http.StatusOK {
					done <- time.Since(from)
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- time.Minute
	}()
	return done
}

// waitAdmission waits for the first 202 to a buy sent after from and returns when it came.
func waitAdmission(t *testing.T, d *driver, from time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	var at time.Duration
	waitFor(t, "a 202 after the failure", timeout, func() bool {
		for _, a := range d.snapshot() {
			if a.call == "buy" && a.status == http.StatusAccepted && a.sent.After(from) {
				at = a.got.Sub(from)
				return true
			}
		}
		return false
	})
	return at
}

func roundAll(ds []time.Duration) []string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Round(time.Millisecond).String()
	}
	return s
}

// checkPathsAfterFailover runs the calls the buyers did not, on every gateway, against the new
// master: the status and a winner's result; then the restock path: a winner cancels their order
// through the order backend, the stock comes back to the store, and the gateways' sold-out flags
// are cleared (restock broadcast, or the probe) so that a late buyer wins it.
func (e *env) checkPathsAfterFailover(gws []*gateway, be *backend, d *driver) {
	t := e.t
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	var winner userKey
	for k := range d.wins() {
		winner = k
		break
	}
	if winner.user == "" {
		t.Fatal("no winner")
	}
	tok := mint(t, winner.user)
	var orderID string
	for _, g := range gws {
		var st struct {
			State     string `json:"state"`
			Remaining int64  `json:"remaining"`
		}
		if code := getJSON(t, hc, g.base+"/seckill/"+e.act.id, "", &st); code != http.StatusOK || st.State != "sold_out" {
			t.Errorf("%s status after the failover: %d %+v, want 200 sold_out", g.name, code, st)
		}
		var res struct {
			Code    string `json:"code"`
			OrderID string `json:"order_id"`
		}
		if code := getJSON(t, hc, g.base+"/seckill/"+e.act.id+"/result", tok, &res); code != http.StatusOK || res.Code != "pending_payment" || res.OrderID == "" {
			t.Errorf("%s result of %s after the failover: %d %+v, want 200 pending_payment with an order", g.name, winner.user, code, res)
		}
		orderID = res.OrderID
	}
	if orderID == "" {
		return
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+be.listen+"/orders/"+orderID+"/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("cancel %s: %v", orderID, err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("cancel %s: %d", orderID, res.StatusCode)
	}
	cancelled := time.Now()
	late := newDriver(t, e.act.id, gws...)
	late.retryCap = 100 * time.Millisecond
	var won attempt
	waitFor(t, "a late buyer winning the cancelled item", time.Minute, func() bool {
		b := makeBuyers(t, fmt.Sprintf("late%d", time.Now().UnixNano()%1e6), 1, 1)[0]
		for gw := range gws {
			b.gateway = gw
			late.buy(context.Background(), b)
		}
		for _, a := range late.snapshot() {
			if a.call == "buy" && a.status == http.StatusAccepted {
				won = a
				return true
			}
		}
		return false
	})
	t.Logf("paths after the failover: status and result answered by both gateways; a cancelled order's item sold again %s after the cancel (to %s on gateway %d)",
		won.got.Sub(cancelled).Round(time.Millisecond), won.user, won.gateway+1)
	if rep, _ := e.reconcile(); !rep.OK() {
		t.Errorf("reconcile after the restock:\n%s", rep)
	}
}

// checkCaptchas issues captchas on the captcha gateway, one per new user, and fetches each image,
// until three captchas kept on the new master (on Cluster, captchas spread over the masters by
// their id) were issued and fetched; it fails the test when that takes over a minute, and
// describes what it did.
func (e *env) checkCaptchas(cg *gateway, promoted *testsrv.Redis, round int) string {
	t := e.t
	t.Helper()
	hc := &http.Client{Timeout: 5 * time.Second}
	began := time.Now()
	var issued, onNew, refused int
	for onNew < 3 {
		if time.Since(began) > time.Minute {
			t.Fatalf("round %d: %d captchas issued, %d on the new master, %d refused, within a minute", round, issued, onNew, refused)
		}
		user := fmt.Sprintf("captcha-%d-%d", round, issued+refused)
		req, _ := http.NewRequest(http.MethodPost, cg.base+"/seckill/"+e.act.id+"-captcha/captcha", nil)
		req.Header.Set("Authorization", "Bearer "+mint(t, user))
		var ans struct {
			CaptchaID string `json:"captcha_id"`
			Image     string `json:"image"`
		}
		res, err := hc.Do(req)
		if err == nil {
			err = json.NewDecoder(res.Body).Decode(&ans)
			_ = res.Body.Close()
		}
		if err != nil || res.StatusCode != http.StatusOK || ans.CaptchaID == "" {
			refused++ // 503 while the gateway's breaker is open
			time.Sleep(100 * time.Millisecond)
			continue
		}
		issued++
		img, err := hc.Get(cg.base + ans.Image)
		if err != nil {
			t.Fatalf("round %d: fetch captcha image %s: %v", round, ans.Image, err)
		}
		_ = img.Body.Close()
		if img.StatusCode != http.StatusOK {
			t.Errorf("round %d: captcha image %s: %d, want 200", round, ans.Image, img.StatusCode)
		}
		if e.topo != cluster || e.cluster.MasterOf(keyPrefix+":captcha:{"+ans.CaptchaID+"}") == promoted {
			onNew++
		}
	}
	return fmt.Sprintf("%d captchas issued and fetched once the old master was a replica (%d on the new master, %d refused first)", issued, onNew, refused)
}

func mint(t *testing.T, user string) string {
	t.Helper()
	tok, err := jwtauth.Mint(jwtauth.MintConfig{Secret: []byte(jwtSecret), Subject: user, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// getJSON GETs url (with a bearer token if one is given), decodes the body into v and returns the
// status (0 without an answer).
func getJSON(t *testing.T, hc *http.Client, url, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Logf("GET %s: %v", url, err)
		return 0
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	if err := json.NewDecoder(strings.NewReader(string(b))).Decode(v); err != nil {
		t.Logf("GET %s: %d %s", url, res.StatusCode, b)
	}
	return res.StatusCode
}

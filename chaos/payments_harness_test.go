package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// The payment scenarios' price: what every order costs, and in the ledger's unit.
const (
	payPrice       = "19.99 USD"
	payAmountCents = 1999
	payMethod      = "pm_card_visa"
)

// payConfig is what a payment scenario's gateways run with.
type payConfig struct {
	payWithin   time.Duration // the activity's pay_within
	settleAfter time.Duration // orders settle_after (the charge call is bounded by half of it)
	// webhookSecret, when set, is payments stripe's webhook_secret: the gateway takes Stripe's
	// signed notifications on /orders/webhooks/stripe, signatures older than webhookTolerance
	// refused.
	webhookSecret    string
	webhookTolerance time.Duration
}

// webhookLines is the payments stripe block's webhook options of c (none without a secret).
func (c payConfig) webhookLines() string {
	if c.webhookSecret == "" {
		return ""
	}
	s := "\n\t\t\t\twebhook_secret " + c.webhookSecret
	if c.webhookTolerance > 0 {
		s += "\n\t\t\t\twebhook_tolerance " + c.webhookTolerance.String()
	}
	return s
}

// startPayGateway runs a gateway with the embedded order backend on the scenario's PostgreSQL,
// charging through the real payments stripe module pointed at the ledger (and taking its signed
// notifications when c has a webhook secret), and the order API.
func (e *env) startPayGateway(name string, l *ledger, c payConfig) *gateway {
	e.t.Helper()
	port, err := testsrv.FreePort()
	if err != nil {
		e.t.Fatal(err)
	}
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	a := e.act
	cfg := filepath.Join(dir, "Caddyfile")
	caddyfile := fmt.Sprintf(`{
	admin off
	persist_config off
	seckill {
		store redis %s
		jwt {
			algorithms HS256
			hmac_secret %s
		}
		url_secret %s
		captcha off
		orders postgres "%s" {
			consumer_name %s
			sweep_every 200ms
			settle_after %s
			claim_idle 2s
			payments stripe {
				secret_key %s
				api_base %s%s
			}
		}
		activity %s {
			stock %d
			limit %d
			start %s
			end %s
			pay_within %s
			price %s
			title "Chaos sale"
		}
	}
}

http://:%d {
	bind 127.0.0.1
	route /seckill/* {
		seckill
	}
	route /orders/* {
		seckill_orders
	}
}
`, strings.Join(e.redisAddrs(), " "), jwtSecret, urlSecret, e.dsn, name, c.settleAfter, ledgerSecret, l.url(), c.webhookLines(),
		a.id, a.stock, a.limit, a.start.UTC().Format(time.RFC3339), a.end.UTC().Format(time.RFC3339), c.payWithin, payPrice, port)
	if err := os.WriteFile(cfg, []byte(caddyfile), 0o600); err != nil {
		e.t.Fatal(err)
	}
	g := &gateway{base: fmt.Sprintf("http://127.0.0.1:%d", port), activity: a.id}
	g.server = e.newServer(name, bins.caddy, []string{"run", "--config", cfg, "--adapter", "caddyfile"}, nil)
	g.waitReady()
	return g
}

// payCall is one pay call a buyer made.
type payCall struct {
	gateway    int
	sent, got  time.Time
	status     int    // 0: no answer
	err        string // why there was none
	code       string
	retryAfter string
}

// payment is one winner paying for its order, as the buyer saw it.
type payment struct {
	user, token string
	order       string
	payBefore   time.Time
	calls       []payCall
	outcome     string // paid, expired, declined, pending (202), gone (gave up after a lost answer)
}

// payers pay for the winners' orders through the gateways' order API.
type payers struct {
	t     *testing.T
	act   string
	bases []string
	hc    *http.Client

	mu       sync.Mutex
	payments []*payment
}

func newPayers(t *testing.T, act string, gws ...*gateway) *payers {
	bases, hc := gatewayClient(t, 256, 20*time.Second, gws)
	return &payers{t: t, act: act, bases: bases, hc: hc}
}

// winners are the buyers the driver saw win, with their tokens.
func winners(d *driver, bs []buyer) []*payment {
	tok := map[string]string{}
	for _, b := range bs {
		tok[b.user] = b.token
	}
	var out []*payment
	for k := range d.wins() {
		out = append(out, &payment{user: k.user, token: tok[k.user]})
	}
	return out
}

// findOrder polls the buyer's result until it names the order its win became.
func (p *payers) findOrder(ctx context.Context, pm *payment, gw int) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.bases[gw]+"/seckill/"+p.act+"/result", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+pm.token)
		if res, err := p.hc.Do(req); err == nil {
			var r struct {
				OrderID     string `json:"order_id"`
				PayBeforeMS int64  `json:"pay_before_ms"`
			}
			err := json.NewDecoder(res.Body).Decode(&r)
			_ = res.Body.Close()
			if err == nil && res.StatusCode == http.StatusOK && r.OrderID != "" && r.PayBeforeMS > 0 {
				pm.order, pm.payBefore = r.OrderID, time.UnixMilli(r.PayBeforeMS)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the order of %s: %w", pm.user, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		gw = (gw + 1) % len(p.bases)
	}
}

// pay pays pm's order on gateway gw until a definite answer: 200 paid, 409 expired, 402
// declined or 202 pending. No answer is retried 50 ms later on the next gateway, a 503 after its
// Retry-After (at most 1 s); a patient buyer always retries, one that is not gives up when a call
// it had sent lost its answer (the buyer left: the attempt is the sweeper's to settle). A refused
// connection (the gateway is down) reached nobody and is retried by every buyer.
func (p *payers) pay(ctx context.Context, pm *payment, gw int, patient bool) {
	defer func() {
		p.mu.Lock()
		p.payments = append(p.payments, pm)
		p.mu.Unlock()
	}()
	for ctx.Err() == nil {
		c := p.payOnce(ctx, pm, gw)
		pm.calls = append(pm.calls, c)
		var wait time.Duration
		switch c.status {
		case http.StatusOK:
			pm.outcome = "paid"
			return
		case http.StatusConflict:
			pm.outcome = "expired"
			return
		case http.StatusPaymentRequired:
			pm.outcome = "declined"
			return
		case http.StatusAccepted:
			pm.outcome = "pending"
			return
		case http.StatusServiceUnavailable:
			secs, err := strconv.Atoi(c.retryAfter)
			if err != nil || secs < 0 {
				secs = 1
			}
			wait = min(time.Duration(secs)*time.Second, time.Second)
		case 0:
			if !patient && !strings.Contains(c.err, "connection refused") {
				pm.outcome = "gone"
				return
			}
			wait = noAnswerWait
			gw = (gw + 1) % len(p.bases)
		default:
			p.t.Errorf("pay %s of %s: %d %s: not an answer of the order API's contract", pm.order, pm.user, c.status, c.code)
			pm.outcome = "refused"
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
	p.t.Errorf("pay %s of %s: no definite answer before the deadline (%d calls)", pm.order, pm.user, len(pm.calls))
}

func (p *payers) payOnce(ctx context.Context, pm *payment, gw int) payCall {
	c := payCall{gateway: gw, sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.bases[gw]+"/orders/"+pm.order+"/pay",
		strings.NewReader(`{"payment_method":"`+payMethod+`"}`))
	if err != nil {
		c.err = err.Error()
		return c
	}
	req.Header.Set("Authorization", "Bearer "+pm.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := p.hc.Do(req)
	c.got = time.Now()
	if err != nil {
		c.err = err.Error()
		if errors.Is(err, syscall.ECONNREFUSED) {
			c.err = "connection refused"
		}
		return c
	}
	raw, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		c.err = "reading the answer: " + err.Error()
		return c
	}
	var ans struct {
		Code   string `json:"code"`
		Status string `json:"status"`
	}
	_ = json.Unmarshal(raw, &ans)
	c.status, c.code, c.retryAfter = res.StatusCode, ans.Code, res.Header.Get("Retry-After")
	if c.status == http.StatusOK && ans.Status != string(orderbackend.StatusPaid) {
		p.t.Errorf("pay %s of %s: 200 with status %q, not paid: %s", pm.order, pm.user, ans.Status, raw)
	}
	return c
}

// outcomes counts the payments by outcome.
func (p *payers) outcomes() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := map[string]int{}
	for _, pm := range p.payments {
		n[pm.outcome]++
	}
	return n
}

// calls is every pay call made, in no order.
func (p *payers) calls() []payCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []payCall
	for _, pm := range p.payments {
		out = append(out, pm.calls...)
	}
	return out
}

// payAll finds every winner's order, then pays it, conc at a time: payer i starts no earlier
// than at(i) (nil: at once), and is patient(i) or not.
func (p *payers) payAll(ctx context.Context, pms []*payment, conc int, at func(i int, pm *payment) time.Time, patient func(i int) bool) {
	p.t.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, conc)
	for i, pm := range pms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gw := i % len(p.bases)
			if err := p.findOrder(ctx, pm, gw); err != nil {
				p.t.Error(err)
				return
			}
			if at != nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Until(at(i, pm))):
				}
			}
			sem <- struct{}{}
			defer func() { <-sem }()
			p.pay(ctx, pm, gw, patient == nil || patient(i))
		}()
	}
	wg.Wait()
}

// moneyEnd is the end of every payment scenario, once every buyer has finished: the sweeper
// settles every attempt (none left started or refund_due), reconcile with money passes
// (charged-unpaid 0, unsettled 0, no paid order without its charge) along with the common end's
// checks, and the ledger's own books agree with the database: as many charges and refunds, for
// the same amounts, every PaymentIntent refunded at most once, every paid order exactly one charge
// kept and every other order none. It logs the reconcile summary line and returns the report.
func (e *env) moneyEnd(d *driver, l *ledger) orderbackend.Report {
	e.t.Helper()
	t := e.t
	repo := e.orders()
	began := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ps, err := repo.Payments(ctx, e.act.id)
		cancel()
		var open []string
		for _, p := range ps {
			if p.Status == orderbackend.PaymentStarted || p.Status == orderbackend.PaymentRefundDue {
				open = append(open, p.Key+" "+string(p.Status))
			}
		}
		if err == nil && len(open) == 0 {
			break
		}
		if time.Since(began) > e.mode.drain {
			t.Fatalf("the sweeper did not settle every payment attempt within %s (error %v); open: %v", e.mode.drain, err, open)
		}
		time.Sleep(100 * time.Millisecond)
	}
	settled := time.Since(began)
	rep, _ := e.verify(d)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ps, err := repo.Payments(ctx, e.act.id)
	if err != nil {
		t.Fatalf("read payments: %v", err)
	}
	orders, err := repo.Orders(ctx, e.act.id)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	lt := l.totals()
	var dbCharges, dbRefunds int
	var dbCharged, dbRefunded int64
	for _, p := range ps {
		if p.Amount.Amount != payAmountCents || p.Amount.Currency != "USD" {
			t.Errorf("payment %s is %s, not %s", p.Key, p.Amount, payPrice)
		}
		switch p.Status {
		case orderbackend.PaymentSucceeded:
			dbCharges++
			dbCharged += p.Amount.Amount
			if !lt.SucceededKeys[p.Key] || lt.RefundedKeys[p.Key] {
				t.Errorf("payment %s is succeeded in the database; the ledger has it charged %v, refunded %v",
					p.Key, lt.SucceededKeys[p.Key], lt.RefundedKeys[p.Key])
			}
		case orderbackend.PaymentRefunded:
			dbCharges++
			dbRefunds++
			dbCharged += p.Amount.Amount
			dbRefunded += p.Amount.Amount
			if !lt.RefundedKeys[p.Key] {
				t.Errorf("payment %s is refunded in the database, not in the ledger", p.Key)
			}
		case orderbackend.PaymentFailed:
			if lt.SucceededKeys[p.Key] {
				t.Errorf("payment %s is failed in the database, but the ledger took its money", p.Key)
			}
		}
	}
	if lt.Processing != 0 {
		t.Errorf("the ledger still has %d PaymentIntents processing", lt.Processing)
	}
	if dbCharges != lt.Succeeded || dbCharged != lt.ChargedAmount {
		t.Errorf("charges: database %d (%d cents), ledger %d (%d cents)", dbCharges, dbCharged, lt.Succeeded, lt.ChargedAmount)
	}
	if dbRefunds != lt.Refunds || dbRefunded != lt.RefundedAmount {
		t.Errorf("refunds: database %d (%d cents), ledger %d (%d cents)", dbRefunds, dbRefunded, lt.Refunds, lt.RefundedAmount)
	}
	if lt.MultiRefunded != 0 {
		t.Errorf("%d PaymentIntents were refunded more than once", lt.MultiRefunded)
	}
	if int64(dbCharges) != rep.Charges || int64(dbRefunds) != rep.Refunds {
		t.Errorf("reconcile counts %d charges and %d refunds; the payments table %d and %d", rep.Charges, rep.Refunds, dbCharges, dbRefunds)
	}
	for _, o := range orders {
		kept := lt.KeptPerOrder[o.ID]
		switch {
		case o.Status == orderbackend.StatusPaid && kept != 1:
			t.Errorf("order %s is paid; the ledger keeps %d charges of it", o.ID, kept)
		case o.Status != orderbackend.StatusPaid && kept != 0:
			t.Errorf("order %s is %s; the ledger keeps %d charges of it (sold twice, or money kept)", o.ID, o.Status, kept)
		}
	}
	t.Logf("reconcile (money) after the sweeper settled (%s): charges %d (%s USD), refunds %d (%s USD), charged unpaid %d, unsettled %d; orders %d: paid %d, cancelled %d, pending %d; ledger: %d PaymentIntents, %d succeeded (%d cents), %d refunds (%d cents); %s",
		settled.Round(time.Millisecond), rep.Charges, cents(rep.ChargedAmount), rep.Refunds, cents(rep.RefundedAmount),
		rep.ChargedUnpaid, rep.UnsettledPayments, rep.Orders, rep.Paid, rep.Cancelled, rep.Pending,
		lt.Intents, lt.Succeeded, lt.ChargedAmount, lt.Refunds, lt.RefundedAmount, l.counts())
	return rep
}

// cents formats minor units as a decimal.
func cents(n int64) string { return fmt.Sprintf("%d.%02d", n/100, n%100) }

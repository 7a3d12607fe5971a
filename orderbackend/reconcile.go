package orderbackend

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/money"
)

// Report is what Reconcile found for one activity. Violations is empty when every promise of
// the README (never oversell, never lose a win, never undersell) holds.
type Report struct {
	Activity string `json:"activity"`

	// The store's side.
	StockTotal     int64 `json:"stock_total"`     // the activity's definition
	Limit          int64 `json:"limit"`           // per user
	StoreRemaining int64 `json:"store_remaining"` // stock left in the store
	StoreSold      int64 `json:"store_sold"`      // items held by buyers in the store
	StoreBuyers    int64 `json:"store_buyers"`    // distinct users holding items in the store
	Wins           int64 `json:"wins"`            // entries ever queued (each is one win)
	DeadLetters    int64 `json:"dead_letters"`    // of which dead-lettered

	// The database's side.
	DBTotal       int64 `json:"db_total"`
	DBLeft        int64 `json:"db_left"`
	Orders        int64 `json:"orders"`
	Pending       int64 `json:"pending_payment"`
	Paid          int64 `json:"paid"`
	Cancelled     int64 `json:"cancelled"`
	PendingQty    int64 `json:"pending_qty"`
	PaidQty       int64 `json:"paid_qty"`
	CancelledQty  int64 `json:"cancelled_qty"`
	OverdueUnpaid int64 `json:"overdue_unpaid"` // pending orders past their window, not yet swept
	OutboxBacklog int64 `json:"outbox_backlog"` // committed changes not yet relayed to the store
	InFlight      int64 `json:"in_flight"`      // wins neither an order nor dead-lettered yet

	// The money: the payment attempts of the activity's orders, amounts in minor units of Currency.
	Currency          string `json:"currency,omitempty"`
	Charges           int64  `json:"charges"`            // attempts that took money
	ChargedAmount     int64  `json:"charged_amount"`     // what they took
	Refunds           int64  `json:"refunds"`            // of which given back
	RefundedAmount    int64  `json:"refunded_amount"`    // what was given back
	ChargedUnpaid     int64  `json:"charged_unpaid"`     // took money, paid no order, not refunded: 0 once the sweeper ran
	UnsettledPayments int64  `json:"unsettled_payments"` // attempts without outcome whose order is no longer pending
	PaidWithoutCharge int64  `json:"paid_without_charge"`

	Violations []string `json:"violations,omitempty"`
}

// OK reports whether no invariant is violated.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// String formats the report for a terminal.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "activity %s\n", r.Activity)
	fmt.Fprintf(&b, "  store:    total %d, remaining %d, sold %d, buyers %d, wins %d, dead letters %d\n",
		r.StockTotal, r.StoreRemaining, r.StoreSold, r.StoreBuyers, r.Wins, r.DeadLetters)
	fmt.Fprintf(&b, "  database: total %d, left %d, orders %d (pending %d/%d items, paid %d/%d, cancelled %d/%d)\n",
		r.DBTotal, r.DBLeft, r.Orders, r.Pending, r.PendingQty, r.Paid, r.PaidQty, r.Cancelled, r.CancelledQty)
	fmt.Fprintf(&b, "  in flight %d, outbox backlog %d, overdue unpaid %d\n", r.InFlight, r.OutboxBacklog, r.OverdueUnpaid)
	fmt.Fprintf(&b, "  money:    charges %d (%s), refunds %d (%s), charged unpaid %d, unsettled payments %d\n",
		r.Charges, money.Price{Amount: r.ChargedAmount, Currency: r.Currency}.Decimal(), r.Refunds,
		money.Price{Amount: r.RefundedAmount, Currency: r.Currency}.Decimal(), r.ChargedUnpaid, r.UnsettledPayments)
	if r.OK() {
		b.WriteString("  OK: every invariant holds\n")
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  VIOLATION: %s\n", v)
	}
	return b.String()
}

// ReconcileStore is what Reconcile reads of the store: the activity's counters and its dead
// letters.
type ReconcileStore interface {
	Activity(ctx context.Context, id string) (admission.Snapshot, error)
	DeadLetters(ctx context.Context, activity string, count int) ([]admission.Win, error)
}

// Reconcile checks the README's promises for one activity, across the store and the
// order database:
//
//   - never oversell: the items held (store and database) are within the stock, and no user holds
//     more than the limit;
//   - never lose a win: every queued win is exactly one order or one dead letter;
//   - never undersell: the store's remaining stock equals the database's left, and the database
//     total equals left plus the items of pending and paid orders;
//   - money ends right: every charge paid its order or was refunded (charged unpaid = 0), no
//     attempt of a closed order is left without outcome, and every paid order has its charge.
//
// The last two hold only once the queue has drained and the outbox has been relayed; a backlog is
// itself reported as a violation, so run it after the sale (or retry until it passes). It reads
// and never writes. An error means it could not look, not that an invariant failed.
func Reconcile(ctx context.Context, store ReconcileStore, repo Repository, activity string) (Report, error) {
	r := Report{Activity: activity}
	snap, err := store.Activity(ctx, activity)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: %w", activity, err)
	}
	r.StockTotal, r.Limit = snap.Stock, snap.Limit
	r.StoreRemaining, r.StoreSold, r.StoreBuyers = snap.Remaining, snap.Sold, snap.Buyers
	r.Wins, r.DeadLetters = snap.Queued, snap.Dead

	stock, err := repo.Stock(ctx, activity)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: %w", activity, err)
	}
	r.DBTotal, r.DBLeft = stock.Total, stock.Left
	orders, err := repo.Orders(ctx, activity)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: %w", activity, err)
	}
	if r.OutboxBacklog, err = repo.OutboxLen(ctx, activity); err != nil {
		return r, fmt.Errorf("reconcile %s: %w", activity, err)
	}
	payments, err := repo.Payments(ctx, activity)
	if err != nil {
		return r, fmt.Errorf("reconcile %s: %w", activity, err)
	}
	var dead []admission.Win
	if r.DeadLetters > 0 {
		if dead, err = store.DeadLetters(ctx, activity, int(r.DeadLetters)+1); err != nil {
			return r, fmt.Errorf("reconcile %s: %w", activity, err)
		}
	}

	now := time.Now()
	held := map[string]int64{} // user → items in pending and paid orders
	byReservation := map[string]bool{}
	for _, o := range orders {
		r.Orders++
		byReservation[o.ReservationID] = true
		switch o.Status {
		case StatusPending:
			r.Pending++
			r.PendingQty += o.Qty
			held[o.User] += o.Qty
			if !o.ExpiresAt.After(now) {
				r.OverdueUnpaid++
			}
		case StatusPaid:
			r.Paid++
			r.PaidQty += o.Qty
			held[o.User] += o.Qty
		case StatusCancelled:
			r.Cancelled++
			r.CancelledQty += o.Qty
		}
	}
	r.reconcileMoney(orders, payments)
	deadWithOrder := 0
	for _, w := range dead {
		if byReservation[w.ReservationID] {
			deadWithOrder++
		}
	}
	r.InFlight = r.Wins - r.Orders - r.DeadLetters + int64(deadWithOrder)

	fail := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }
	live := r.PendingQty + r.PaidQty

	// Never oversell.
	if r.StoreRemaining < 0 || r.StoreSold > r.StockTotal {
		fail("oversold in the store: %d items held of %d, %d remaining", r.StoreSold, r.StockTotal, r.StoreRemaining)
	}
	if live > r.StockTotal {
		fail("oversold in the database: %d items in pending and paid orders of %d", live, r.StockTotal)
	}
	var over []string
	for u, q := range held {
		if q > r.Limit {
			over = append(over, fmt.Sprintf("%s holds %d", u, q))
		}
	}
	if len(over) > 0 {
		sort.Strings(over)
		fail("per-user limit %d exceeded: %s", r.Limit, strings.Join(over, ", "))
	}

	// Never lose a win.
	switch {
	case r.InFlight > 0:
		fail("%d wins are neither an order nor a dead letter (queue not drained yet, or wins lost)", r.InFlight)
	case r.InFlight < 0:
		fail("%d more orders and dead letters than wins", -r.InFlight)
	}
	if deadWithOrder > 0 {
		fail("%d dead-lettered wins also have an order", deadWithOrder)
	}

	// Never undersell (and the two counters agree).
	if r.OutboxBacklog > 0 {
		fail("%d committed changes not yet relayed to the store (outbox not drained)", r.OutboxBacklog)
	}
	if r.DBTotal != r.StockTotal {
		fail("database total %d differs from the store's stock %d", r.DBTotal, r.StockTotal)
	}
	if r.DBTotal != r.DBLeft+live {
		fail("database total %d != left %d + items in pending and paid orders %d", r.DBTotal, r.DBLeft, live)
	}
	if r.StoreRemaining != r.DBLeft {
		fail("store remaining %d != database left %d", r.StoreRemaining, r.DBLeft)
	}
	if r.StoreBuyers != int64(len(held)) {
		fail("%d buyers hold items in the store, %d users hold pending or paid orders", r.StoreBuyers, len(held))
	}

	// Money ends right.
	if r.ChargedUnpaid > 0 {
		fail("%d charges stand without a paid order or a refund (the sweeper refunds them; a failing refund is logged)", r.ChargedUnpaid)
	}
	if r.UnsettledPayments > 0 {
		fail("%d payment attempts of closed orders have no outcome yet (the sweeper asks the provider)", r.UnsettledPayments)
	}
	if r.PaidWithoutCharge > 0 {
		fail("%d paid orders have no successful charge", r.PaidWithoutCharge)
	}
	return r, nil
}

// reconcileMoney counts the activity's charges and refunds and what is wrong with them.
func (r *Report) reconcileMoney(orders []Order, payments []Payment) {
	byID := make(map[string]Order, len(orders))
	for _, o := range orders {
		byID[o.ID] = o
	}
	charged := map[string]bool{} // keys of attempts that took money
	for _, p := range payments {
		o := byID[p.OrderID]
		if r.Currency == "" {
			r.Currency = p.Amount.Currency
		}
		switch {
		case p.Status.Charged():
			charged[p.Key] = true
			r.Charges++
			r.ChargedAmount += p.Amount.Amount
			switch {
			case p.Status == PaymentRefunded:
				r.Refunds++
				r.RefundedAmount += p.Amount.Amount
			case p.Status == PaymentRefundDue, o.Status != StatusPaid || o.PaymentRef != p.Key:
				r.ChargedUnpaid++
			}
		case p.Status == PaymentStarted && o.Status != StatusPending:
			r.UnsettledPayments++
		}
	}
	for _, o := range orders {
		if o.Status == StatusPaid && !charged[o.PaymentRef] {
			r.PaidWithoutCharge++
		}
	}
}

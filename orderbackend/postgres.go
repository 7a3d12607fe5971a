package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is the PostgreSQL Repository (pgx connection pool), for production.
type Postgres struct {
	pool  *pgxpool.Pool
	stats txCounter // the order transactions CreateOrders committed
}

var _ Repository = (*Postgres)(nil)

// migrationLockKey serialises migrations of backends starting together (pg_advisory_lock).
const migrationLockKey = 0x5ec_0b_01

// NewPostgres connects to dsn and applies the migrations, so it fails if the database cannot be
// reached at start. Later outages surface as ErrUnavailable and the pool reconnects by itself.
// A new database gets DefaultPartitions partitions, an existing one keeps its own.
func NewPostgres(ctx context.Context, dsn string) (*Postgres, error) {
	return NewPostgresWith(ctx, dsn, PostgresOptions{})
}

// NewPostgresWith is NewPostgres with schema options: an existing database whose partitions
// differ from opts.Partitions is refused with a *PartitionsChangedError (ErrPartitionsChanged).
func NewPostgresWith(ctx context.Context, dsn string, opts PostgresOptions) (*Postgres, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		// A database host that drops packets must not hang a connection attempt forever.
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	p := &Postgres{pool: pool}
	if err := p.migrate(ctx, opts.Partitions); err != nil {
		pool.Close()
		return nil, err
	}
	return p, nil
}

// migrate applies the migrations not yet applied, then checks (or, on a database it just created,
// sets) the partitions, all under one advisory lock.
func (p *Postgres) migrate(ctx context.Context, partitions int) error {
	ms, err := migrations("postgres")
	if err != nil {
		return err
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return pgErr("postgres: migrate", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLockKey)); err != nil {
		return pgErr("postgres: migration lock", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLockKey)) //nolint:errcheck // the session ends with the connection anyway
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return pgErr("postgres: create schema_migrations", err)
	}
	fresh := false // this call made the database: it may take any number of partitions
	for _, m := range ms {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM schema_migrations WHERE version = $1", m.version).Scan(&n); err != nil {
			return pgErr("postgres: read schema_migrations", err)
		}
		if n > 0 {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			// No arguments: pgx uses the simple protocol, which runs a multi-statement file.
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", m.version)
			return err
		})
		if err != nil {
			return pgErr("postgres: migration "+m.version, err)
		}
		fresh = fresh || m.version == ms[0].version
	}
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return pgCheckPartitions(ctx, tx, fresh, partitions) })
	if errors.Is(err, ErrPartitionsChanged) {
		return err
	}
	return pgErr("postgres: partitions", err)
}

// Close closes the pool.
func (p *Postgres) Close() error {
	p.pool.Close()
	return nil
}

// pgErr wraps err with op, marking failures that may pass by themselves with ErrUnavailable: any
// error that is not a server's answer (connection refused or broken, pool exhausted) and server
// answers that mean "not now" (shutdown, too many connections, serialization failure, deadlock,
// a server that refuses writes because it is a standby or a demoted primary in a failover, a
// statement or lock timeout).
func pgErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),       // insufficient resources
			strings.HasPrefix(pe.Code, "57P"),      // admin shutdown, crash shutdown, cannot connect now
			pe.Code == "40001", pe.Code == "40P01", // serialization failure, deadlock
			pe.Code == "25006",                     // read-only transaction: a standby, or a primary demoted in a failover
			pe.Code == "57014", pe.Code == "55P03": // statement timeout (query canceled), lock timeout
			return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
}

// EnsureStock implements Repository.
func (p *Postgres) EnsureStock(ctx context.Context, activity string, total int64) error {
	_, err := p.pool.Exec(ctx, `INSERT INTO stock (activity, total, "left") VALUES ($1, $2, $2)
		ON CONFLICT (activity) DO UPDATE
		SET total = EXCLUDED.total, "left" = stock."left" + (EXCLUDED.total - stock.total)
		WHERE stock.total <> EXCLUDED.total`, activity, total)
	return pgErr("postgres: ensure stock "+activity, err)
}

const pgOrderCols = `id, reservation_id, activity, user_id, qty, status, created_at, expires_at, paid_at, cancelled_at, payment_ref, amount, currency, title`

// pgOrderColsOf is pgOrderCols qualified by a table alias, for joins.
func pgOrderColsOf(alias string) string {
	return alias + "." + strings.ReplaceAll(pgOrderCols, ", ", ", "+alias+".")
}

func scanPGOrder(row pgx.Row) (Order, error) {
	var (
		o                 Order
		status            string
		paidAt, cancelled *time.Time
		ref               *string
	)
	if err := row.Scan(&o.ID, &o.ReservationID, &o.Activity, &o.User, &o.Qty, &status, &o.CreatedAt, &o.ExpiresAt,
		&paidAt, &cancelled, &ref, &o.Amount.Amount, &o.Amount.Currency, &o.Title); err != nil {
		return Order{}, err
	}
	o.Status = Status(status)
	if paidAt != nil {
		o.PaidAt = *paidAt
	}
	if cancelled != nil {
		o.CancelledAt = *cancelled
	}
	if ref != nil {
		o.PaymentRef = *ref
	}
	return o, nil
}

// CreateOrder implements Repository: a batch of one.
func (p *Postgres) CreateOrder(ctx context.Context, n NewOrder) (Order, bool, error) {
	return firstOutcome(p.CreateOrders(ctx, []NewOrder{n}))
}

// CreateOrders implements Repository.
//
// The fast path (see fastTake) is one statement in a transaction, three round trips whatever the
// batch's size: the summed stock taken by the guarded update, and, only if it took it, every
// order inserted from arrays. The careful path is four: BEGIN; the stock row locked (FOR UPDATE)
// and the batch's existing orders read; the new orders inserted and their summed stock taken;
// COMMIT.
//
// Both take the stock row before any order row, as every transaction here that creates orders
// does, so two consumers holding overlapping reservations (a claim after a slow consumer) run one
// after the other: the second finds the first's committed orders and makes none twice. No
// statement of a healthy batch fails, so a refused or redelivered win never aborts the
// transaction: no insert runs for an activity without stock row (which would break the foreign
// key), and the insert is ON CONFLICT DO NOTHING.
func (p *Postgres) CreateOrders(ctx context.Context, ns []NewOrder) ([]CreateOutcome, error) {
	if len(ns) == 0 {
		return nil, nil
	}
	op := fmt.Sprintf("postgres: create %d orders for reservation %s", len(ns), ns[0].ReservationID)
	if len(ns) == 1 {
		op = "postgres: create order for reservation " + ns[0].ReservationID
	}
	act, err := batchActivity(op, ns)
	if err != nil {
		return nil, err
	}
	ns = normalizedAll(ns)
	if take, ok := fastTake(ns); ok {
		err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			// The insert's EXISTS runs the update first (an uncorrelated one-time filter), and
			// inserts nothing unless the guard let the update through.
			a := pgOrderArrays(ns)
			// The guard row (order_keys) of each win goes in first; an order is inserted only for
			// a guard row this statement made, so a reservation never gets two orders whatever
			// partitions they would fall in.
			tag, err := tx.Exec(ctx, `WITH taken AS (
					UPDATE stock SET "left" = "left" - $8 WHERE activity = $1 AND "left" >= $8 RETURNING 1),
				t AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[], $7::timestamptz[],
				            $9::bigint[], $10::text[], $11::text[]) AS t (i, r, u, q, c, e, m, cu, ti)),
				k AS (INSERT INTO order_keys (activity, reservation_id, order_id, user_id)
					SELECT $1, r, i, u FROM t WHERE EXISTS (SELECT FROM taken)
					ON CONFLICT DO NOTHING RETURNING order_id)
				INSERT INTO orders (id, reservation_id, activity, user_id, qty, status, created_at, expires_at, amount, currency, title)
				SELECT i, r, $1, u, q, 'pending_payment', c, e, m, cu, ti
				FROM t WHERE i IN (SELECT order_id FROM k)`,
				act, a.ids, a.resvs, a.users, a.qtys, a.created, a.expires, take, a.amounts, a.currencies, a.titles)
			if err != nil {
				return err
			}
			if tag.RowsAffected() != int64(len(ns)) {
				return errReplan
			}
			return nil
		})
		if err == nil {
			p.stats.add(1, len(ns))
			return allCreated(ns), nil
		}
		if !errors.Is(err, errReplan) {
			return nil, pgErr(op, err)
		}
	}
	resvs := make([]string, len(ns))
	for i, n := range ns {
		resvs[i] = n.ReservationID
	}
	var plan batchPlan
	for attempt := 1; ; attempt++ {
		err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
			var (
				left     int64
				hasStock = true
				existing = make(map[string]Order, len(ns))
			)
			b := &pgx.Batch{}
			b.Queue(`SELECT "left" FROM stock WHERE activity = $1 FOR UPDATE`, act).QueryRow(func(row pgx.Row) error {
				err := row.Scan(&left)
				if errors.Is(err, pgx.ErrNoRows) {
					hasStock = false
					return nil
				}
				return err
			})
			// Archived orders too: order_keys keeps their guard rows, so a win delivered again
			// after its sale was archived must find its order there, not plan a new one.
			b.Queue(`SELECT `+pgOrderColsOf("o")+` FROM order_keys k JOIN orders o ON o.user_id = k.user_id AND o.id = k.order_id
				WHERE k.activity = $1 AND k.reservation_id = ANY($2)
				UNION ALL SELECT `+pgOrderColsOf("a")+` FROM order_keys k JOIN orders_archive a ON a.user_id = k.user_id AND a.id = k.order_id
				WHERE k.activity = $1 AND k.reservation_id = ANY($2)`, act, resvs).
				Query(func(rows pgx.Rows) error {
					for rows.Next() {
						o, err := scanPGOrder(rows)
						if err != nil {
							return err
						}
						existing[o.ReservationID] = o
					}
					return rows.Err()
				})
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			plan = planBatch("postgres", ns, hasStock, left, existing)
			if len(plan.inserts) == 0 {
				return nil
			}
			a := pgOrderArrays(plan.inserts)
			b = &pgx.Batch{}
			b.Queue(`UPDATE stock SET "left" = "left" - $2 WHERE activity = $1 AND "left" >= $2`, act, plan.take).
				Exec(func(tag pgconn.CommandTag) error {
					if tag.RowsAffected() != 1 {
						return errReplan
					}
					return nil
				})
			b.Queue(`WITH t AS (SELECT * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[],
				            $7::timestamptz[], $8::bigint[], $9::text[], $10::text[]) AS t (i, r, u, q, c, e, m, cu, ti)),
				k AS (INSERT INTO order_keys (activity, reservation_id, order_id, user_id) SELECT $1, r, i, u FROM t
					ON CONFLICT DO NOTHING RETURNING order_id)
				INSERT INTO orders (id, reservation_id, activity, user_id, qty, status, created_at, expires_at, amount, currency, title)
				SELECT i, r, $1, u, q, 'pending_payment', c, e, m, cu, ti
				FROM t WHERE i IN (SELECT order_id FROM k)`,
				act, a.ids, a.resvs, a.users, a.qtys, a.created, a.expires, a.amounts, a.currencies, a.titles).
				Exec(func(tag pgconn.CommandTag) error {
					if tag.RowsAffected() != int64(len(plan.inserts)) {
						return errReplan
					}
					return nil
				})
			return tx.SendBatch(ctx, b).Close()
		})
		if !errors.Is(err, errReplan) {
			break
		}
		if attempt == batchAttempts {
			return nil, fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
		}
	}
	if err != nil {
		return nil, pgErr(op, err)
	}
	p.stats.add(1, len(ns))
	return plan.outs, nil
}

// TxStats implements TxStatsReporter.
func (p *Postgres) TxStats() TxStats { return p.stats.snapshot() }

// pgArrays are new orders as column arrays: one statement text inserts any number of them, so
// pgx prepares it once per connection.
type pgArrays struct {
	ids, resvs, users  []string
	qtys, amounts      []int64
	created, expires   []time.Time
	currencies, titles []string
}

func pgOrderArrays(ns []NewOrder) pgArrays {
	a := pgArrays{
		ids: make([]string, len(ns)), resvs: make([]string, len(ns)), users: make([]string, len(ns)),
		qtys: make([]int64, len(ns)), created: make([]time.Time, len(ns)), expires: make([]time.Time, len(ns)),
		amounts: make([]int64, len(ns)), currencies: make([]string, len(ns)), titles: make([]string, len(ns)),
	}
	for i, n := range ns {
		a.ids[i], a.resvs[i], a.users[i], a.qtys[i], a.created[i], a.expires[i] = n.ID, n.ReservationID, n.User, n.Qty, n.CreatedAt, n.ExpiresAt
		a.amounts[i], a.currencies[i], a.titles[i] = n.Amount.Amount, n.Amount.Currency, n.Title
	}
	return a
}

// Order implements Repository: the buyer is found in the guard table, then only their partition
// is read.
func (p *Postgres) Order(ctx context.Context, id string) (Order, error) {
	user, err := pgOrderUser(ctx, p.pool, id)
	if err != nil {
		return Order{}, pgErrKeep("postgres: order "+id, err)
	}
	return p.BuyerOrder(ctx, user, id)
}

// BuyerOrder implements Repository: one partition, the buyer's.
func (p *Postgres) BuyerOrder(ctx context.Context, user, id string) (Order, error) {
	o, err := scanPGOrder(p.pool.QueryRow(ctx, `SELECT `+pgOrderCols+` FROM orders WHERE user_id = $1 AND id = $2`, user, id))
	if errors.Is(err, pgx.ErrNoRows) {
		// An archived sale's order (Archive) is read from the archive.
		o, err = pgArchivedOrder(ctx, p, user, id)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	return o, pgErr("postgres: order "+id, err)
}

// OrderByReservation implements Repository.
func (p *Postgres) OrderByReservation(ctx context.Context, activity, reservationID string) (Order, error) {
	var id, user string
	err := p.pool.QueryRow(ctx, `SELECT order_id, user_id FROM order_keys WHERE activity = $1 AND reservation_id = $2`,
		activity, reservationID).Scan(&id, &user)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, fmt.Errorf("reservation %s: %w", reservationID, ErrNotFound)
	}
	if err != nil {
		return Order{}, pgErr("postgres: order of reservation "+reservationID, err)
	}
	return p.BuyerOrder(ctx, user, id)
}

// pgErrKeep is pgErr for errors that may already be this package's answers (ErrNotFound).
func pgErrKeep(op string, err error) error {
	if errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotPending) || errors.Is(err, ErrExpired) {
		return err
	}
	return pgErr(op, err)
}

// Cancel implements Repository.
func (p *Postgres) Cancel(ctx context.Context, id string, now time.Time) (Order, error) {
	user, err := pgOrderUser(ctx, p.pool, id)
	if err != nil {
		return Order{}, pgErrKeep("postgres: cancel order "+id, err)
	}
	return p.BuyerCancel(ctx, user, id, now)
}

// BuyerCancel implements Repository: one partition, the buyer's.
func (p *Postgres) BuyerCancel(ctx context.Context, user, id string, now time.Time) (Order, error) {
	var o Order
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		o, err = scanPGOrder(tx.QueryRow(ctx, `UPDATE orders SET status = 'cancelled', cancelled_at = $3
			WHERE user_id = $1 AND id = $2 AND status = 'pending_payment' RETURNING `+pgOrderCols, user, id, now))
		if err != nil {
			return err
		}
		return pgGiveBack(ctx, tx, []Order{o}, now)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		o, err := p.BuyerOrder(ctx, user, id)
		if err != nil {
			return Order{}, err
		}
		if o.Status == StatusCancelled {
			return o, nil
		}
		return o, fmt.Errorf("cancel order %s: %w", id, ErrNotPending)
	}
	return o, pgErr("postgres: cancel order "+id, err)
}

// CancelExpired implements Repository. It is one of the scans meant to read every partition (by
// the partial index on expires_at each partition has).
func (p *Postgres) CancelExpired(ctx context.Context, now time.Time, limit int) ([]Order, error) {
	var out []Order
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		out = out[:0]
		// SKIP LOCKED: sweepers on several nodes take disjoint batches, and a row a payment is
		// updating right now is left to that payment. Locking re-reads the row, so one a payment
		// just committed no longer matches.
		rows, err := tx.Query(ctx, `UPDATE orders o SET status = 'cancelled', cancelled_at = $1
			FROM (SELECT user_id, id FROM orders WHERE status = 'pending_payment' AND expires_at <= $1
			      ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) c
			WHERE o.user_id = c.user_id AND o.id = c.id AND o.status = 'pending_payment'
			RETURNING `+pgOrderColsOf("o"), now, limit)
		if err != nil {
			return err
		}
		for rows.Next() {
			o, err := scanPGOrder(rows)
			if err != nil {
				rows.Close()
				return err
			}
			out = append(out, o)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return pgGiveBack(ctx, tx, out, now)
	})
	if err != nil {
		return nil, pgErr("postgres: cancel expired orders", err)
	}
	return out, nil
}

// pgGiveBack returns cancelled orders' items to the database stock and queues their release in
// the store, inside the cancelling transaction.
func pgGiveBack(ctx context.Context, tx pgx.Tx, orders []Order, now time.Time) error {
	for _, o := range orders {
		if _, err := tx.Exec(ctx, `UPDATE stock SET "left" = "left" + $2 WHERE activity = $1`, o.Activity, o.Qty); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (activity, reservation_id, order_id, user_id, kind, created_at)
			VALUES ($1, $2, $3, $4, 'release', $5)`, o.Activity, o.ReservationID, o.ID, o.User, now); err != nil {
			return err
		}
	}
	return nil
}

// Outbox implements Repository.
func (p *Postgres) Outbox(ctx context.Context, limit int) ([]OutboxEntry, error) {
	// The rows name their order and buyer (migration 0004): no join over the orders' partitions.
	rows, err := p.pool.Query(ctx, `SELECT id, kind, activity, reservation_id, order_id, user_id, created_at
		FROM outbox ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, pgErr("postgres: read outbox", err)
	}
	defer rows.Close()
	var out []OutboxEntry
	for rows.Next() {
		var (
			e    OutboxEntry
			kind string
		)
		if err := rows.Scan(&e.ID, &kind, &e.Activity, &e.ReservationID, &e.OrderID, &e.User, &e.CreatedAt); err != nil {
			return nil, pgErr("postgres: read outbox", err)
		}
		e.Kind = OutboxKind(kind)
		out = append(out, e)
	}
	return out, pgErr("postgres: read outbox", rows.Err())
}

// DeleteOutbox implements Repository.
func (p *Postgres) DeleteOutbox(ctx context.Context, id int64) error {
	_, err := p.pool.Exec(ctx, `DELETE FROM outbox WHERE id = $1`, id)
	return pgErr(fmt.Sprintf("postgres: delete outbox row %d", id), err)
}

// Stock implements Repository.
func (p *Postgres) Stock(ctx context.Context, activity string) (Stock, error) {
	s := Stock{Activity: activity}
	err := p.pool.QueryRow(ctx, `SELECT total, "left" FROM stock WHERE activity = $1`, activity).Scan(&s.Total, &s.Left)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stock{}, fmt.Errorf("stock of %s: %w", activity, ErrNotFound)
	}
	return s, pgErr("postgres: stock of "+activity, err)
}

// Orders implements Repository.
func (p *Postgres) Orders(ctx context.Context, activity string) ([]Order, error) {
	// With the archived ones (Archive): reconcile counts every order of the sale.
	rows, err := p.pool.Query(ctx, `SELECT `+pgOrderCols+` FROM orders WHERE activity = $1
		UNION ALL SELECT `+pgOrderCols+` FROM orders_archive WHERE activity = $1 ORDER BY created_at, id`, activity)
	if err != nil {
		return nil, pgErr("postgres: orders of "+activity, err)
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		o, err := scanPGOrder(rows)
		if err != nil {
			return nil, pgErr("postgres: orders of "+activity, err)
		}
		out = append(out, o)
	}
	return out, pgErr("postgres: orders of "+activity, rows.Err())
}

// OutboxLen implements Repository.
func (p *Postgres) OutboxLen(ctx context.Context, activity string) (int64, error) {
	var n int64
	err := p.pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE activity = $1`, activity).Scan(&n)
	return n, pgErr("postgres: outbox length of "+activity, err)
}

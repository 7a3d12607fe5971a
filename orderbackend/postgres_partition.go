package orderbackend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultPartitions is the number of hash partitions (by user_id) a new PostgreSQL order database
// gets when PostgresOptions.Partitions is 0. An existing database keeps the number it has.
const DefaultPartitions = 8

// MaxPartitions bounds PostgresOptions.Partitions: past a few hundred partitions, planning and
// the all-partition scans (sweeper, reconcile) cost more than the partitions save.
const MaxPartitions = 1024

// PostgresOptions are the schema choices of a PostgreSQL order database.
type PostgresOptions struct {
	// Partitions is the number of hash partitions of orders and payments, by user_id: 1 is plain
	// tables, 0 takes DefaultPartitions for a new database and what an existing one has. A number
	// other than the one an existing database has is refused (ErrPartitionsChanged): changing it
	// rewrites every order, which only Repartition (the partition command) does.
	Partitions int
}

// validate checks the options.
func (o PostgresOptions) validate() error {
	if o.Partitions < 0 || o.Partitions > MaxPartitions {
		return fmt.Errorf("postgres: partitions %d: want 1 to %d (0: the default)", o.Partitions, MaxPartitions)
	}
	return nil
}

// ErrPartitionsChanged is the start-up error of a configuration whose partitions differ from the
// database's; errors.As gives the *PartitionsChangedError with both numbers.
var ErrPartitionsChanged = errors.New("the number of partitions differs from the database's")

// PartitionsChangedError says that an existing database has Have partitions and the configuration
// asks for Want.
type PartitionsChangedError struct {
	Have, Want int
}

func (e *PartitionsChangedError) Error() string {
	return fmt.Sprintf("postgres: the orders table has %d partition(s) and the configuration asks for %d: "+
		"configure partitions %d, or repartition the database first (every order is rewritten in one transaction, "+
		"with the sale stopped): `caddy seckill partition --config <file> --partitions %d` or "+
		"`orderbackend partition -db <dsn> -partitions %d`", e.Have, e.Want, e.Have, e.Want, e.Want)
}

// Is makes errors.Is(err, ErrPartitionsChanged) hold.
func (e *PartitionsChangedError) Is(target error) bool { return target == ErrPartitionsChanged }

// pgPartitions reads the number of partitions the database records.
func pgPartitions(ctx context.Context, q pgx.Tx) (int, error) {
	var v string
	if err := q.QueryRow(ctx, `SELECT value FROM schema_settings WHERE name = 'partitions' FOR UPDATE`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema_settings: %w", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("schema_settings: partitions %q is not a positive number", v)
	}
	return n, nil
}

// PartitionReport is what Repartition did.
type PartitionReport struct {
	Before, After int   // partitions
	Orders        int64 // orders, the same before and after (checked)
	Payments      int64 // payment attempts, likewise
}

// String is the partition command's report.
func (r PartitionReport) String() string {
	if r.Before == r.After {
		return fmt.Sprintf("partitions: %d already; nothing to do (%d orders, %d payment attempts)\n", r.After, r.Orders, r.Payments)
	}
	return fmt.Sprintf("partitions: %d -> %d; %d orders and %d payment attempts moved, every one kept\n",
		r.Before, r.After, r.Orders, r.Payments)
}

// Repartition rewrites the orders and payments tables of the database at dsn into n hash
// partitions by user_id (1: plain tables), in one transaction that holds both tables exclusively:
// run it with the sale and the order backends stopped. Every row is copied, the counts are
// checked before the commit, and a database that has n already is left alone. The migrations are
// applied first, so it also upgrades a database made before partitions existed.
func Repartition(ctx context.Context, dsn string, n int) (PartitionReport, error) {
	if n < 1 || n > MaxPartitions {
		return PartitionReport{}, fmt.Errorf("partition: %d partitions: want 1 to %d", n, MaxPartitions)
	}
	p, err := NewPostgresWith(ctx, dsn, PostgresOptions{})
	if err != nil {
		return PartitionReport{}, err
	}
	defer p.pool.Close()
	var rep PartitionReport
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		var err error
		rep, err = pgRepartition(ctx, tx, n)
		return err
	})
	if err != nil {
		return PartitionReport{}, pgErr("postgres: partition", err)
	}
	return rep, nil
}

// pgRepartition rebuilds orders and payments with n partitions inside tx. The new tables copy the
// old ones' columns, defaults and checks (LIKE), so columns a later migration adds move too; their
// keys are the partition-compatible ones (user_id first), the same whatever n.
func pgRepartition(ctx context.Context, tx pgx.Tx, n int) (PartitionReport, error) {
	if _, err := tx.Exec(ctx, `LOCK TABLE orders, payments, order_keys IN ACCESS EXCLUSIVE MODE`); err != nil {
		return PartitionReport{}, err
	}
	have, err := pgPartitions(ctx, tx)
	if err != nil {
		return PartitionReport{}, err
	}
	rep := PartitionReport{Before: have, After: n}
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM payments)`).
		Scan(&rep.Orders, &rep.Payments); err != nil {
		return rep, err
	}
	if have == n {
		return rep, nil
	}
	by := ""
	if n > 1 {
		by = " PARTITION BY HASH (user_id)"
	}
	stmts := []string{
		`CREATE TABLE orders_next (LIKE orders INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
			PRIMARY KEY (user_id, id), FOREIGN KEY (activity) REFERENCES stock (activity))` + by,
		`CREATE TABLE payments_next (LIKE payments INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
			PRIMARY KEY (user_id, key), UNIQUE (user_id, order_id, attempt),
			FOREIGN KEY (user_id, order_id) REFERENCES orders_next (user_id, id))` + by,
	}
	if n > 1 {
		for i := range n {
			for _, t := range []string{"orders_next", "payments_next"} {
				stmts = append(stmts, fmt.Sprintf(`CREATE TABLE %s_p%d PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d)`,
					t, i, t, n, i))
			}
		}
	}
	stmts = append(stmts,
		`INSERT INTO orders_next SELECT * FROM orders`,
		`INSERT INTO payments_next SELECT * FROM payments`,
		`DROP TABLE payments`,
		`DROP TABLE orders`,
		// The sweeper's scans (every partition), and reconcile's and the archive's by activity.
		`CREATE INDEX orders_next_pending_expiry ON orders_next (expires_at) WHERE status = 'pending_payment'`,
		`CREATE INDEX orders_next_activity_user ON orders_next (activity, user_id)`,
		`CREATE INDEX payments_next_open ON payments_next (updated_at) WHERE status IN ('started', 'refund_due')`,
	)
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return rep, fmt.Errorf("%s: %w", firstLine(s), err)
		}
	}
	// The new tables, their partitions and their indexes take the old names, so that the next
	// repartition can use the _next names again.
	rows, err := tx.Query(ctx, `SELECT c.relname, c.relkind::text FROM pg_class c
		WHERE c.relnamespace = current_schema()::regnamespace
		  AND (c.relname LIKE 'orders\_next%' OR c.relname LIKE 'payments\_next%')`)
	if err != nil {
		return rep, err
	}
	type rel struct{ name, kind string }
	var rels []rel
	for rows.Next() {
		var r rel
		if err := rows.Scan(&r.name, &r.kind); err != nil {
			rows.Close()
			return rep, err
		}
		rels = append(rels, r)
	}
	if err := rows.Err(); err != nil {
		return rep, err
	}
	for _, r := range rels {
		what := "TABLE"
		if r.kind == "i" || r.kind == "I" {
			what = "INDEX"
		}
		to := strings.Replace(r.name, "_next", "", 1)
		if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER %s %s RENAME TO %s`, what,
			pgx.Identifier{r.name}.Sanitize(), pgx.Identifier{to}.Sanitize())); err != nil {
			return rep, fmt.Errorf("rename %s to %s: %w", r.name, to, err)
		}
	}
	var orders, payments int64
	if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM payments)`).
		Scan(&orders, &payments); err != nil {
		return rep, err
	}
	if orders != rep.Orders || payments != rep.Payments {
		return rep, fmt.Errorf("copied %d orders and %d payments of %d and %d: rolled back", orders, payments, rep.Orders, rep.Payments)
	}
	if _, err := tx.Exec(ctx, `UPDATE schema_settings SET value = $1 WHERE name = 'partitions'`, strconv.Itoa(n)); err != nil {
		return rep, err
	}
	return rep, nil
}

// firstLine shortens a statement for an error message.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(l)
}

// pgCheckPartitions runs at start, under the migration lock, after the migrations: a database the
// migrations just created takes the configured partitions (default DefaultPartitions); an existing
// one must have what the configuration asks, if it asks.
func pgCheckPartitions(ctx context.Context, tx pgx.Tx, fresh bool, want int) error {
	have, err := pgPartitions(ctx, tx)
	if err != nil {
		return err
	}
	switch {
	case fresh:
		if want == 0 {
			want = DefaultPartitions
		}
		if want != have {
			_, err := pgRepartition(ctx, tx, want)
			return err
		}
	case want != 0 && want != have:
		return &PartitionsChangedError{Have: have, Want: want}
	}
	return nil
}

// pgOrderUser finds the buyer of an order id in the guard table (one index lookup), so that a
// call that has only the id (the sweeper, a payment key) reads the buyer's partition alone.
func pgOrderUser(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, id string) (string, error) {
	var user string
	err := q.QueryRow(ctx, `SELECT user_id FROM order_keys WHERE order_id = $1`, id).Scan(&user)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("order %s: %w", id, ErrNotFound)
	}
	return user, err
}

// orderOfKey is the order id in a payment key (order id, "-", attempt).
func orderOfKey(key string) (string, bool) {
	i := strings.LastIndexByte(key, '-')
	if i <= 0 {
		return "", false
	}
	if _, err := strconv.Atoi(key[i+1:]); err != nil {
		return "", false
	}
	return key[:i], true
}

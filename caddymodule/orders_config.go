package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// OrdersConfig runs the order backend (package orderbackend) inside the Caddy process: the wins
// the store queues become orders in the database, unpaid orders are cancelled after the activity's
// pay_within and their stock given back, and the seckill_orders handler serves the order API.
// For a single node; several nodes run the standalone cmd/orderbackend instead.
type OrdersConfig struct {
	// Type is the database: "sqlite" (a file, no server) or "postgres".
	Type string `json:"type"`

	// DSN is the SQLite file path (relative to Caddy's working directory) or the PostgreSQL URL or
	// key=value DSN. Placeholders such as {env.DATABASE_URL} are replaced at provisioning.
	DSN string `json:"dsn"`

	// SweepEvery is how often orders whose payment window closed are looked for; default 1s.
	SweepEvery caddy.Duration `json:"sweep_every,omitempty"`

	// SettleAfter is how long a payment attempt may stay without outcome (a crash, a provider
	// that did not answer) before the sweeper asks the provider about it by its key; a charge
	// call is bounded by half of it. Default 1m.
	SettleAfter caddy.Duration `json:"settle_after,omitempty"`

	// ConsumerName is this process's name in every activity's consumer group. Keep it stable
	// across restarts (a restarted process first re-reads its own unacknowledged wins) and
	// distinct per process; default the host name.
	ConsumerName string `json:"consumer_name,omitempty"`

	// MaxDeliveries is how often a win that keeps failing (for a reason other than an outage) is
	// tried before it is dead-lettered; default 5.
	MaxDeliveries int64 `json:"max_deliveries,omitempty"`

	// ClaimIdle is how long a win may stay unacknowledged by another consumer before this one
	// takes it over; default 30s.
	ClaimIdle caddy.Duration `json:"claim_idle,omitempty"`

	// PaymentsRaw is the payment provider the order API charges, a guest module of the namespace
	// seckill.payments chosen by its "provider" key; default {"provider": "mock"}, which takes no
	// money (the demo's).
	PaymentsRaw json.RawMessage `json:"payments,omitempty" caddy:"namespace=seckill.payments inline_key=provider"`

	// Partitions is, for postgres, the number of hash partitions (by user_id) of the orders and
	// payments tables: 1 is plain tables; unset, a new database gets 8 and an existing one keeps
	// what it has. A number other than an existing database's is refused at start: `caddy
	// seckill partition` changes it.
	Partitions int `json:"partitions,omitempty"`
}

// Order database types.
const (
	ordersSQLite   = "sqlite"
	ordersPostgres = "postgres"
)

// discoverEvery is how often the embedded backend looks for activities created since (through
// the admin API or by another node) to start consuming their wins.
const discoverEvery = time.Second

// resolve returns the configuration with placeholders replaced, validated.
func (c *OrdersConfig) resolve(repl *caddy.Replacer) (*OrdersConfig, error) {
	r := *c
	r.DSN = repl.ReplaceKnown(c.DSN, "")
	r.ConsumerName = repl.ReplaceKnown(c.ConsumerName, "")
	if strings.TrimSpace(c.DSN) != "" && strings.TrimSpace(r.DSN) == "" {
		return nil, fmt.Errorf("orders %s: %q is empty once placeholders are replaced: set the variable", c.Type, c.DSN)
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// validate checks the configuration; it is also run by the Caddyfile parser, before placeholders
// are replaced.
func (c *OrdersConfig) validate() error {
	switch c.Type {
	case ordersSQLite, ordersPostgres:
	case "":
		return errors.New("orders: the database type is required: orders sqlite <file> or orders postgres <dsn>")
	default:
		return fmt.Errorf("orders: unknown database %q: want sqlite or postgres", c.Type)
	}
	switch {
	case strings.TrimSpace(c.DSN) == "" && c.Type == ordersSQLite:
		return errors.New("orders sqlite: the database file is required, e.g. orders sqlite ./orders.db")
	case strings.TrimSpace(c.DSN) == "":
		return errors.New("orders postgres: the DSN is required, e.g. orders postgres {env.DATABASE_URL}")
	case c.Type == ordersSQLite && strings.ContainsRune(c.DSN, '?'):
		return fmt.Errorf("orders sqlite: file %q must not contain '?' (connection options are set by the backend)", c.DSN)
	case c.SweepEvery < 0:
		return fmt.Errorf("orders: sweep_every %s is negative", time.Duration(c.SweepEvery))
	case c.SettleAfter < 0:
		return fmt.Errorf("orders: settle_after %s is negative", time.Duration(c.SettleAfter))
	case c.ClaimIdle < 0:
		return fmt.Errorf("orders: claim_idle %s is negative", time.Duration(c.ClaimIdle))
	case c.MaxDeliveries < 0:
		return fmt.Errorf("orders: max_deliveries %d is negative", c.MaxDeliveries)
	case c.Partitions != 0 && c.Type != ordersPostgres:
		return fmt.Errorf("orders %s: partitions is a postgres option", c.Type)
	case c.Partitions < 0 || c.Partitions > orderbackend.MaxPartitions:
		return fmt.Errorf("orders: partitions %d: want 1 to %d", c.Partitions, orderbackend.MaxPartitions)
	case strings.ContainsAny(c.ConsumerName, " \t\r\n"):
		return fmt.Errorf("orders: consumer_name %q must not contain spaces", c.ConsumerName)
	}
	return nil
}

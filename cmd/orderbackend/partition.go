package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// cmdPartition rewrites a PostgreSQL order database into -partitions hash partitions by user
// (orderbackend.Repartition): one transaction, every order kept; run it with the backends stopped.
func cmdPartition(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orderbackend partition", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", env("SECKILL_ORDERS_DB", ""), "order database: postgres://... [SECKILL_ORDERS_DB]")
	n := fs.Int("partitions", 0, fmt.Sprintf("the number of partitions wanted, 1 (not partitioned) to %d; required", orderbackend.MaxPartitions))
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	kind, dsn, err := parseDB(*db)
	if err == nil && kind != "postgres" {
		err = fmt.Errorf("-db %q: partitions are a postgres feature", *db)
	}
	if err == nil && (*n < 1 || *n > orderbackend.MaxPartitions) {
		err = fmt.Errorf("-partitions %d: want 1 to %d", *n, orderbackend.MaxPartitions)
	}
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend partition:", err)
		return exitError
	}
	rep, err := orderbackend.Repartition(ctx, dsn, *n)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend partition:", err)
		return exitError
	}
	_, _ = fmt.Fprint(stdout, rep)
	return exitOK
}

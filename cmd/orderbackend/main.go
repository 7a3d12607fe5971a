// Command orderbackend is the standalone order backend: it turns the wins queued in the Redis
// admission store into orders in PostgreSQL or SQLite, serves the order API, cancels unpaid
// orders and gives their stock back. Its reconcile subcommand checks the sale's invariants.
//
//	orderbackend run -redis 10.0.0.5:6379 -db postgres://shop@db/orders -listen :8081 [-metrics-listen 127.0.0.1:9181]
//	orderbackend reconcile -redis 10.0.0.5:6379 -db postgres://shop@db/orders [-activity phone-1001]
//	orderbackend partition -db postgres://shop@db/orders -partitions 16
//	orderbackend archive -redis 10.0.0.5:6379 -db postgres://shop@db/orders -activity phone-1001
//
// Every flag can also come from the environment (SECKILL_REDIS_ADDR, SECKILL_REDIS_PASSWORD,
// SECKILL_ORDERS_DB, SECKILL_JWT_SECRET ...); see -h of each subcommand.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit statuses.
const (
	exitOK        = 0
	exitViolation = 1 // reconcile found a broken invariant
	exitError     = 2 // bad usage or a failure to run
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitError
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, args[1:], stderr)
	case "reconcile":
		return cmdReconcile(ctx, args[1:], stdout, stderr)
	case "partition":
		return cmdPartition(ctx, args[1:], stdout, stderr)
	case "archive":
		return cmdArchive(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	_, _ = fmt.Fprintf(stderr, "orderbackend: unknown subcommand %q\n", args[0])
	usage(stderr)
	return exitError
}

func usage(w io.Writer) {
	_, _ = fmt.Fprint(w, `usage:
  orderbackend run [flags]         consume wins, serve the order API, sweep and relay
  orderbackend reconcile [flags]   check the invariants of every (or one) activity; exit 1 on a violation
  orderbackend partition -db postgres://... -partitions N
                                   rewrite the orders and payments into N hash partitions by user (1: none),
                                   in one transaction, every order kept; with the backends stopped
  orderbackend archive -activity ID [flags]
                                   move a finished sale's orders to the archive tables once reconcile holds
Run "orderbackend <subcommand> -h" for its flags.
`)
}

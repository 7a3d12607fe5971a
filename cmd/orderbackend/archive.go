package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// cmdArchive moves a finished sale's orders and payment attempts to the archive tables, once
// reconcile holds for it (orderbackend.Repository.Archive).
func cmdArchive(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orderbackend archive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c        common
		activity = fs.String("activity", "", "the finished sale to archive; required")
		batch    = fs.Int("batch", orderbackend.DefaultArchiveBatch, "orders moved per transaction")
		asJSON   = fs.Bool("json", false, "print the report as JSON")
	)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	if !admission.ValidActivityID(*activity) || *batch < 1 {
		_, _ = fmt.Fprintf(stderr, "orderbackend archive: -activity %q and -batch %d: want a valid activity id and a batch of at least 1\n", *activity, *batch)
		return exitError
	}
	store, repo, err := c.open(ctx)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend archive:", err)
		return exitError
	}
	defer func() { _ = store.Close(); _ = repo.Close() }()
	r, err := orderbackend.Reconcile(ctx, store, repo, *activity)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend archive:", err)
		return exitError
	}
	if !r.OK() {
		_, _ = fmt.Fprintf(stderr, "orderbackend archive: reconcile does not hold for %s; nothing archived:\n%s", *activity, r)
		return exitViolation
	}
	rep, err := repo.Archive(ctx, *activity, *batch)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend archive:", err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return exitOK
	}
	_, _ = fmt.Fprint(stdout, rep)
	return exitOK
}

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

func cmdReconcile(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orderbackend reconcile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c        common
		activity = fs.String("activity", "", "check only this activity (default: every activity in the store)")
		asJSON   = fs.Bool("json", false, "print the reports as JSON")
	)
	c.register(fs)
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	store, repo, err := c.open(ctx)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "orderbackend reconcile:", err)
		return exitError
	}
	defer func() { _ = store.Close(); _ = repo.Close() }()
	return reconcile(ctx, store, repo, *activity, *asJSON, stdout, stderr)
}

// reconcile checks one or every activity and prints the reports.
func reconcile(ctx context.Context, store admission.Store, repo orderbackend.Repository, activity string, asJSON bool, stdout, stderr io.Writer) int {
	ids := []string{activity}
	if activity == "" {
		var err error
		if ids, err = store.Activities(ctx); err != nil {
			_, _ = fmt.Fprintln(stderr, "orderbackend reconcile:", err)
			return exitError
		}
	}
	code := exitOK
	var reports []orderbackend.Report
	for _, id := range ids {
		r, err := orderbackend.Reconcile(ctx, store, repo, id)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "orderbackend reconcile:", err)
			return exitError
		}
		if !r.OK() {
			code = exitViolation
		}
		reports = append(reports, r)
		if !asJSON {
			_, _ = fmt.Fprint(stdout, r)
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(reports); err != nil {
			_, _ = fmt.Fprintln(stderr, "orderbackend reconcile:", err)
			return exitError
		}
	}
	if len(ids) == 0 {
		_, _ = fmt.Fprintln(stdout, "no activities")
	}
	return code
}

package caddymodule

import (
	"context"
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// ReconcileAnswer is what the admin API's reconcile call answers, and what the reconcile command
// (package seckillcmd) prints with --json.
type ReconcileAnswer struct {
	OK      bool                  `json:"ok"`
	Reports []orderbackend.Report `json:"reports"`
}

// reconcile checks the invariants of one activity, or of every activity in the store when
// activity is empty. It reads and never writes.
func reconcile(ctx context.Context, store admission.Store, repo orderbackend.Repository, activity string) (ReconcileAnswer, error) {
	ids := []string{activity}
	if activity == "" {
		var err error
		if ids, err = store.Activities(ctx); err != nil {
			return ReconcileAnswer{}, fmt.Errorf("reconcile: list activities: %w", err)
		}
	}
	out := ReconcileAnswer{OK: true, Reports: make([]orderbackend.Report, 0, len(ids))}
	for _, id := range ids {
		r, err := orderbackend.Reconcile(ctx, store, repo, id)
		if err != nil {
			return ReconcileAnswer{}, err
		}
		out.OK = out.OK && r.OK()
		out.Reports = append(out.Reports, r)
	}
	return out, nil
}

// ErrNotOpenable is ReconcileDirect's answer for a store that only the process that runs the sale
// can read (no ExistingOpener: store memory).
var ErrNotOpenable = errors.New("the store can be read only through the running Caddy")

// ReconcileDirect is reconcile for the reconcile command (package seckillcmd) on a configuration
// that no Caddy loaded (a decoded app, not provisioned): it opens the app's store outside the
// running Caddy (ExistingOpener: Redis, or a local folder no process holds) and its order
// database, checks activity (every activity when empty), and closes both. It answers
// ErrNotOpenable for a store only the running Caddy can read, and an error wrapping
// admission.ErrInUse for one the running Caddy holds: the command then asks that Caddy.
func (a *App) ReconcileDirect(ctx context.Context, activity string) (ReconcileAnswer, error) {
	var ans ReconcileAnswer
	err := a.direct(ctx, func(st admission.Store, repo orderbackend.Repository) error {
		var err error
		ans, err = reconcile(ctx, st, repo, activity)
		return err
	})
	return ans, err
}

// direct opens the app's store outside the running Caddy and its order database, runs fn on
// them and closes both (ReconcileDirect, ArchiveDirect).
func (a *App) direct(ctx context.Context, fn func(admission.Store, orderbackend.Repository) error) error {
	cctx, cancel := caddy.NewContext(caddy.Context{Context: ctx})
	defer cancel()
	store, err := a.loadStoreModule(cctx)
	if err != nil {
		return err
	}
	opener, ok := store.(ExistingOpener)
	if !ok {
		return ErrNotOpenable
	}
	if a.Orders == nil {
		return errors.New("the seckill app has no orders option: reconcile and archive need the order " +
			"database (for a standalone order backend, use `orderbackend reconcile` or `orderbackend archive`)")
	}
	orders, err := a.Orders.resolve(caddy.NewReplacer())
	if err != nil {
		return err
	}
	st, err := opener.OpenExisting()
	if err != nil {
		return fmt.Errorf("%s: %w", storeDirective(store), err)
	}
	defer func() { _ = st.Close() }()
	repo, err := orderbackend.OpenRepositoryWith(ctx, orders.Type, orders.DSN, orderbackend.PostgresOptions{Partitions: orders.Partitions})
	if err != nil {
		return fmt.Errorf("orders %s: %w", orders.Type, err)
	}
	defer func() { _ = repo.Close() }()
	return fn(st, repo)
}

// PartitionDirect is the partition command (package seckillcmd): it rewrites the orders option's
// PostgreSQL database into n hash partitions by user (orderbackend.Repartition, one transaction,
// every order kept) on a configuration that no Caddy loaded. Run it with the sale stopped; then set
// the orders option's partitions to n (or leave it unset).
func (a *App) PartitionDirect(ctx context.Context, n int) (orderbackend.PartitionReport, error) {
	if a.Orders == nil {
		return orderbackend.PartitionReport{}, errors.New("the seckill app has no orders option: nothing to partition " +
			"(for a standalone order backend, use `orderbackend partition`)")
	}
	orders, err := a.Orders.resolve(caddy.NewReplacer())
	if err != nil {
		return orderbackend.PartitionReport{}, err
	}
	if orders.Type != ordersPostgres {
		return orderbackend.PartitionReport{}, fmt.Errorf("orders %s: partitions are a postgres feature", orders.Type)
	}
	rep, err := orderbackend.Repartition(ctx, orders.DSN, n)
	if err != nil {
		return rep, fmt.Errorf("orders postgres: %w", err)
	}
	return rep, nil
}

// ErrReconcileFails is the archive's answer (ArchiveDirect, POST
// /seckill/activities/{id}/archive) for a sale whose invariants do not hold: archiving would
// freeze a disagreement that must be looked at first.
var ErrReconcileFails = errors.New("reconcile does not hold")

// ArchiveDirect is the archive command (package seckillcmd) on a configuration that no Caddy
// loaded: it opens the store and the order database as ReconcileDirect does (and answers
// ErrNotOpenable or admission.ErrInUse as it does, for the command to ask the running Caddy), and
// archives the activity (archive).
func (a *App) ArchiveDirect(ctx context.Context, activity string, batch int) (orderbackend.ArchiveReport, error) {
	var rep orderbackend.ArchiveReport
	err := a.direct(ctx, func(st admission.Store, repo orderbackend.Repository) error {
		var err error
		rep, err = archive(ctx, st, repo, activity, batch)
		return err
	})
	return rep, err
}

// archive checks that reconcile holds for the activity and then moves its orders to the archive
// tables in batches of batch (orderbackend.Repository.Archive, which refuses a sale with work
// left: orderbackend.ErrNotFinished).
func archive(ctx context.Context, store admission.Store, repo orderbackend.Repository, activity string, batch int) (orderbackend.ArchiveReport, error) {
	ans, err := reconcile(ctx, store, repo, activity)
	if err != nil {
		return orderbackend.ArchiveReport{}, err
	}
	if !ans.OK {
		var b []byte
		for _, r := range ans.Reports {
			b = append(b, r.String()...)
		}
		return orderbackend.ArchiveReport{}, fmt.Errorf("archive %s: %w; nothing archived:\n%s", activity, ErrReconcileFails, b)
	}
	return repo.Archive(ctx, activity, batch)
}

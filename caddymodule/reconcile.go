package caddymodule

import (
	"context"
	"fmt"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/orderbackend"
)

// reconcileAnswer is what the admin API's reconcile call answers, and what the reconcile command
// prints with --json.
type reconcileAnswer struct {
	OK      bool                  `json:"ok"`
	Reports []orderbackend.Report `json:"reports"`
}

// reconcile checks the invariants of one activity, or of every activity in the store when
// activity is empty. It reads and never writes.
func reconcile(ctx context.Context, store admission.Store, repo orderbackend.Repository, activity string) (reconcileAnswer, error) {
	ids := []string{activity}
	if activity == "" {
		var err error
		if ids, err = store.Activities(ctx); err != nil {
			return reconcileAnswer{}, fmt.Errorf("reconcile: list activities: %w", err)
		}
	}
	out := reconcileAnswer{OK: true, Reports: make([]orderbackend.Report, 0, len(ids))}
	for _, id := range ids {
		r, err := orderbackend.Reconcile(ctx, store, repo, id)
		if err != nil {
			return reconcileAnswer{}, err
		}
		out.OK = out.OK && r.OK()
		out.Reports = append(out.Reports, r)
	}
	return out, nil
}

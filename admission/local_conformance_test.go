package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
)

func openLocal(t *testing.T) *admission.LocalStore {
	t.Helper()
	return openLocalWith(t, admission.LocalOptions{})
}

func openLocalWith(t *testing.T, opts admission.LocalOptions) *admission.LocalStore {
	t.Helper()
	s, err := admission.OpenLocalStore(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLocalConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store { return openLocal(t) })
}

// guardedLocal is a started Guard over a LocalStore, as the edge runs it; closing it closes both.
type guardedLocal struct {
	*admission.Guard
	local *admission.LocalStore
}

func (g guardedLocal) Close() error {
	_ = g.Guard.Close()
	return g.local.Close()
}

func TestGuardLocalConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		local := openLocalWith(t, admission.LocalOptions{WaitTimeout: time.Second}) // as the edge opens it
		g := admission.NewGuard(local, admission.GuardOptions{})
		g.Start(context.Background())
		return guardedLocal{g, local}
	})
}

package localstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

func openLocal(t *testing.T) *localstore.Store {
	t.Helper()
	return openLocalWith(t, localstore.Options{})
}

func openLocalWith(t *testing.T, opts localstore.Options) *localstore.Store {
	t.Helper()
	s, err := localstore.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLocalConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store { return openLocal(t) })
}

// guardedLocal is a started Guard over a Store, as the edge runs it; closing it closes both.
type guardedLocal struct {
	*admission.Guard
	local *localstore.Store
}

func (g guardedLocal) Close() error {
	_ = g.Guard.Close()
	return g.local.Close()
}

func TestGuardLocalConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		local := openLocalWith(t, localstore.Options{WaitTimeout: time.Second}) // as the edge opens it
		g := admission.NewGuard(local, admission.GuardOptions{})
		g.Start(context.Background())
		return guardedLocal{g, local}
	})
}

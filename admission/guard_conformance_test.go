package admission_test

import (
	"context"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

// guardedMemory is a started Guard over a localstore.Memory; closing it closes both.
type guardedMemory struct {
	*admission.Guard
	mem *localstore.Memory
}

func (g guardedMemory) Close() error {
	_ = g.Guard.Close()
	return g.mem.Close()
}

// A Guard is a Store: with its sold-out flag and breaker in front, the memory store still passes
// the conformance suite.
func TestGuardConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		mem := localstore.NewMemory(localstore.MemoryOptions{})
		g := admission.NewGuard(mem, admission.GuardOptions{})
		g.Start(context.Background())
		return guardedMemory{g, mem}
	})
}

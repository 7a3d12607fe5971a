package localstore_test

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
)

func TestMemoryConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		return localstore.NewMemory(localstore.MemoryOptions{})
	})
}

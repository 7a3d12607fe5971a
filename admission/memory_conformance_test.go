package admission_test

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
)

func TestMemoryConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		return admission.NewMemoryStore(admission.MemoryOptions{})
	})
}

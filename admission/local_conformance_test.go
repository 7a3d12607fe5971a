package admission_test

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission"
	"github.com/caddy-seckill/caddy-seckill/admission/admissiontest"
)

func TestLocalConformance(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T) admission.Store {
		s, err := admission.OpenLocalStore(t.TempDir(), admission.LocalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

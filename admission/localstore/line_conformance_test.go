package localstore_test

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/waitroom/linetest"
)

func TestMemoryLineConformance(t *testing.T) {
	linetest.Run(t, func(t *testing.T) linetest.Store { return localstore.NewMemory(localstore.MemoryOptions{}) })
}

// TestLocalLineConformance: the durable store keeps the line as Memory does.
func TestLocalLineConformance(t *testing.T) {
	linetest.Run(t, func(t *testing.T) linetest.Store { return openLocal(t) })
}

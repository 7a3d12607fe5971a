package localstore_test

import (
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission/localstore"
	"github.com/caddy-seckill/caddy-seckill/waitroom/linetest"
)

func TestMemoryLineConformance(t *testing.T) {
	linetest.Run(t, func(t *testing.T) linetest.Store { return localstore.NewMemory(localstore.MemoryOptions{}) })
}

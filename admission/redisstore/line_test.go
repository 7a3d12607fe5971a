package redisstore_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/caddy-seckill/caddy-seckill/admission/redisstore"
	"github.com/caddy-seckill/caddy-seckill/internal/testsrv"
	"github.com/caddy-seckill/caddy-seckill/waitroom/linetest"
)

func TestRedisLineConformance(t *testing.T) {
	srv := testsrv.StartRedis(t)
	var n atomic.Int64
	linetest.Run(t, func(t *testing.T) linetest.Store {
		s, _ := redisTestStore(t, srv.Addr, redisstore.Options{KeyPrefix: fmt.Sprintf("line%d", n.Add(1))}, nil)
		return s
	})
}

package admission

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The hot calls (Admit, AppendResult) would otherwise build their key names and box them into
// go-redis's argument list on every call: for admit.lua seven concatenations, seven boxings and a
// slice per script call, most of a small batch's allocations. Each activity's are built and boxed
// once and kept here.

// redisHotKeys is one activity's prebuilt command arguments.
type redisHotKeys struct {
	// admitSha is the start of every admit.lua call: EVALSHA, the script's hash, the key count
	// and the keys (admitKeys); admitEval is the same with EVAL and the source, for NOSCRIPT.
	admitSha, admitEval []any
	results             any // the :results key
}

// maxHotKeys bounds the cache: activities beyond it (a deployment that creates and deletes many)
// get their arguments built per call, as before. Entries of deleted activities are a few strings.
const maxHotKeys = 1024

// redisKeyCache maps activity ids to their *redisHotKeys.
type redisKeyCache struct {
	m sync.Map
	n atomic.Int32
}

// hotKeys returns activity's prebuilt arguments. Only ids of validated requests reach it.
func (s *RedisStore) hotKeys(activity string) *redisHotKeys {
	if v, ok := s.keyCache.m.Load(activity); ok {
		return v.(*redisHotKeys)
	}
	keys := s.admitKeys(activity)
	k := &redisHotKeys{
		admitSha:  make([]any, 3+len(keys)),
		admitEval: make([]any, 3+len(keys)),
		results:   s.key(activity, "results"),
	}
	k.admitSha[0], k.admitSha[1], k.admitSha[2] = "evalsha", s.admit.Hash(), len(keys)
	k.admitEval[0], k.admitEval[1], k.admitEval[2] = "eval", luaAdmit, len(keys)
	for i, key := range keys {
		k.admitSha[3+i], k.admitEval[3+i] = key, key
	}
	if s.keyCache.n.Load() < maxHotKeys {
		if v, loaded := s.keyCache.m.LoadOrStore(activity, k); loaded {
			return v.(*redisHotKeys)
		}
		s.keyCache.n.Add(1)
	}
	return k
}

// redisProcessor is what the store needs of its hot client: the client itself or its
// auto-pipeliner, which both run a command built by hand.
type redisProcessor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

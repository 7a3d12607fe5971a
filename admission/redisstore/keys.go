package redisstore

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// The hot call, Admit, would otherwise build its key names and box them into go-redis's argument
// list on every script call: for admit.lua four concatenations, four boxings and a slice, most of
// a small batch's allocations. Each activity's are built and boxed once and kept here.

// redisHotKeys is one activity's prebuilt command arguments.
type redisHotKeys struct {
	// admitSha is the start of every admit.lua call: EVALSHA, the script's hash, the key count
	// and the keys (admitKeys); admitEval is the same with EVAL and the source, for NOSCRIPT.
	admitSha, admitEval []any
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
func (s *Store) hotKeys(activity string) *redisHotKeys {
	if v, ok := s.keyCache.m.Load(activity); ok {
		return v.(*redisHotKeys)
	}
	k := &redisHotKeys{}
	k.admitSha, k.admitEval = prebuiltEval(s.admit, luaAdmit, s.admitKeys(activity))
	if s.keyCache.n.Load() < maxHotKeys {
		if v, loaded := s.keyCache.m.LoadOrStore(activity, k); loaded {
			return v.(*redisHotKeys)
		}
		s.keyCache.n.Add(1)
	}
	return k
}

// prebuiltEval returns the start of an EVALSHA and an EVAL call of script (source src) with keys.
func prebuiltEval(script *redis.Script, src string, keys []string) (sha, eval []any) {
	sha, eval = make([]any, 3+len(keys)), make([]any, 3+len(keys))
	sha[0], sha[1], sha[2] = "evalsha", script.Hash(), len(keys)
	eval[0], eval[1], eval[2] = "eval", src, len(keys)
	for i, key := range keys {
		sha[3+i], eval[3+i] = key, key
	}
	return sha, eval
}

// redisProcessor is what the store needs of its hot client: the client itself or its
// auto-pipeliner, which both run a command built by hand.
type redisProcessor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

package redisstore

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
	// admit2Sha and admit2Eval are the same for admit_v2.lua (layout 2, redis_layout.go).
	admit2Sha, admit2Eval []any
	results               any // the :results key
}

// admitArgs returns the prebuilt start of an admit call for layout: EVALSHA's, and EVAL's.
func (k *redisHotKeys) admitArgs(layout int) (sha, eval []any) {
	if layout == redisLayout2 {
		return k.admit2Sha, k.admit2Eval
	}
	return k.admitSha, k.admitEval
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
	k := &redisHotKeys{results: s.key(activity, "results")}
	k.admitSha, k.admitEval = prebuiltEval(s.admit, luaAdmit, s.admitKeys(activity))
	k.admit2Sha, k.admit2Eval = prebuiltEval(s.admit2, luaAdmitV2, s.admitKeysV2(activity))
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

package redisstore

import (
	_ "embed" // the Lua scripts ship inside the binary

	"github.com/redis/go-redis/v9"
)

// The Redis store's scripts; each file's header documents its KEYS, ARGV and reply.
var (
	//go:embed lua/define.lua
	luaDefine string
	//go:embed lua/admit.lua
	luaAdmit string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/delete.lua
	luaDelete string
	//go:embed lua/ensure_group.lua
	luaEnsureGroup string
	//go:embed lua/read_pending.lua
	luaReadPending string
	//go:embed lua/claim.lua
	luaClaim string
	//go:embed lua/dead_letter.lua
	luaDeadLetter string
	//go:embed lua/set_result.lua
	luaSetResult string
	//go:embed lua/replay.lua
	luaReplay string

	// Stock buckets (bucket*.go).
	//go:embed lua/bucket_define.lua
	luaBucketDefine string
	//go:embed lua/bucket_setup.lua
	luaBucketSetup string
	//go:embed lua/bucket_take.lua
	luaBucketTake string
	//go:embed lua/bucket_give.lua
	luaBucketGive string
	//go:embed lua/bucket_finish.lua
	luaBucketFinish string
	//go:embed lua/bucket_intent.lua
	luaBucketIntent string
	//go:embed lua/bucket_delete.lua
	luaBucketDelete string
	//go:embed lua/bucket_read.lua
	luaBucketRead string
)

// Stock buckets' scripts: package-level, as a redis.Script is immutable and shared safely.
var (
	scriptBucketDefine = redis.NewScript(luaBucketDefine)
	scriptBucketSetup  = redis.NewScript(luaBucketSetup)
	scriptBucketTake   = redis.NewScript(luaBucketTake)
	scriptBucketGive   = redis.NewScript(luaBucketGive)
	scriptBucketFinish = redis.NewScript(luaBucketFinish)
	scriptBucketIntent = redis.NewScript(luaBucketIntent)
	scriptBucketDelete = redis.NewScript(luaBucketDelete)
	scriptBucketRead   = redis.NewScript(luaBucketRead)
)

// scriptReplay is lua/replay.lua (replay.go), package-level like the buckets' scripts.
var scriptReplay = redis.NewScript(luaReplay)

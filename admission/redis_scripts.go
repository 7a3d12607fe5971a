package admission

import _ "embed" // the Lua scripts ship inside the binary

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
)

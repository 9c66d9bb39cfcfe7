package batonredis

import (
	_ "embed"

	"github.com/redis/rueidis"
)

// Each lock transition is one Lua script: lua/lib.lua (shared definitions
// and the KEYS contract) followed by the transition's own file. Scripts run
// with EVALSHA, falling back to EVAL when the server does not have them yet.

//go:embed lua/lib.lua
var luaLib string

//go:embed lua/acquire.lua
var luaAcquire string

//go:embed lua/release.lua
var luaRelease string

//go:embed lua/extend.lua
var luaExtend string

//go:embed lua/setlimit.lua
var luaSetLimit string

//go:embed lua/inspect.lua
var luaInspect string

// scripts holds the compiled transitions. Tests swap single scripts for
// deliberately broken variants to show that the checkers catch them.
type scripts struct {
	acquire, release, extend, setLimit, inspect *rueidis.Lua
}

func newScripts() *scripts {
	return &scripts{
		acquire:  compile(luaAcquire),
		release:  compile(luaRelease),
		extend:   compile(luaExtend),
		setLimit: compile(luaSetLimit),
		// Read-only, but not sent as EVALSHA_RO: rueidis retries read-only
		// commands on network errors without end, and an unreachable
		// server must give a clear error here as everywhere else.
		inspect: compile(luaInspect),
	}
}

func compile(body string) *rueidis.Lua {
	return rueidis.NewLuaScript(luaLib + "\n" + body)
}

var defaultScripts = newScripts()

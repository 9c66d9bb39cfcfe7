package batonredis

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"

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

// Each job transition is one Lua script too: lua/joblib.lua (shared
// definitions and the KEYS contract of a queue) followed by the
// transition's own file.

//go:embed lua/joblib.lua
var luaJobLib string

//go:embed lua/job_insert.lua
var luaJobInsert string

//go:embed lua/job_fetch.lua
var luaJobFetch string

//go:embed lua/job_extend.lua
var luaJobExtend string

//go:embed lua/job_finish.lua
var luaJobFinish string

//go:embed lua/job_retry.lua
var luaJobRetry string

//go:embed lua/job_delete.lua
var luaJobDelete string

//go:embed lua/job_pause.lua
var luaJobPause string

//go:embed lua/job_list.lua
var luaJobList string

//go:embed lua/job_stats.lua
var luaJobStats string

//go:embed lua/key_setlimit.lua
var luaKeySetLimit string

//go:embed lua/key_get.lua
var luaKeyGet string

//go:embed lua/key_list.lua
var luaKeyList string

// scripts holds the compiled transitions. Tests swap single scripts for
// deliberately broken variants to show that the checkers catch them.
type scripts struct {
	acquire, release, extend, setLimit, inspect *rueidis.Lua

	// jobInsert is sent by hand, pipelined with the SADD to the set of
	// queue names (another slot), so it is kept as source and SHA-1.
	jobInsert                                pipelinedScript
	jobFetch, jobExtend, jobFinish, jobRetry *rueidis.Lua
	jobDelete, jobPause, jobList, jobStats   *rueidis.Lua
	keySetLimit, keyGet, keyList             *rueidis.Lua
}

// pipelinedScript is a script that callers send with EVALSHA inside a
// DoMulti, falling back to EVAL on NOSCRIPT themselves.
type pipelinedScript struct {
	src, sha string
}

// newScripts compiles the scripts, the job scripts with jobLib as their
// shared definitions (luaJobLib but in tests of broken variants).
func newScripts(jobLib string) *scripts {
	compileJob := func(body string) *rueidis.Lua {
		return rueidis.NewLuaScript(jobLib + "\n" + body)
	}
	return &scripts{
		acquire:  compile(luaAcquire),
		release:  compile(luaRelease),
		extend:   compile(luaExtend),
		setLimit: compile(luaSetLimit),
		// Read-only, but not sent as EVALSHA_RO: rueidis retries read-only
		// commands on network errors without end, and an unreachable
		// server must give a clear error here as everywhere else.
		inspect: compile(luaInspect),

		jobInsert: pipelined(jobLib + "\n" + luaJobInsert),
		jobFetch:  compileJob(luaJobFetch),
		jobExtend: compileJob(luaJobExtend),
		jobFinish: compileJob(luaJobFinish),
		jobRetry:  compileJob(luaJobRetry),
		jobDelete: compileJob(luaJobDelete),
		jobPause:  compileJob(luaJobPause),
		// Read-only like inspect, and sent as EVALSHA for the same reason.
		jobList:  compileJob(luaJobList),
		jobStats: compileJob(luaJobStats),

		keySetLimit: compileJob(luaKeySetLimit),
		// Read-only, sent as EVALSHA like inspect.
		keyGet:  compileJob(luaKeyGet),
		keyList: compileJob(luaKeyList),
	}
}

func compile(body string) *rueidis.Lua {
	return rueidis.NewLuaScript(luaLib + "\n" + body)
}

func pipelined(src string) pipelinedScript {
	sum := sha1.Sum([]byte(src))
	return pipelinedScript{src: src, sha: hex.EncodeToString(sum[:])}
}

var defaultScripts = newScripts(luaJobLib)

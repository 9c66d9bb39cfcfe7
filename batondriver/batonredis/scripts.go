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

// Each job transition is one Lua file too; with lua/joblib.lua (shared
// definitions and the KEYS contract of a queue) they make one function
// library (functions.go).

//go:embed lua/joblib.lua
var luaJobLib string

//go:embed lua/job_insert.lua
var luaJobInsert string

//go:embed lua/job_insert_one.lua
var luaJobInsertOne string

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

//go:embed lua/job_cancel.lua
var luaJobCancel string

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

//go:embed lua/schedule_register.lua
var luaScheduleRegister string

//go:embed lua/schedule_list.lua
var luaScheduleList string

//go:embed lua/process_beat.lua
var luaProcessBeat string

//go:embed lua/process_remove.lua
var luaProcessRemove string

//go:embed lua/process_list.lua
var luaProcessList string

// scripts holds the compiled transitions. Tests swap single scripts for
// deliberately broken variants to show that the checkers catch them.
type scripts struct {
	acquire, release, extend, setLimit, inspect *rueidis.Lua

	// The job transitions, one function library (functions.go).
	jobLib                                       *jobLibrary
	jobInsert, jobInsertOne, jobFetch, jobExtend *jobFunc
	jobFinish, jobRetry, jobCancel               *jobFunc
	jobDelete, jobPause, jobList, jobStats       *jobFunc
	keySetLimit, keyGet, keyList                 *jobFunc
	scheduleRegister, scheduleList               *jobFunc
	processBeat, processRemove, processList      *jobFunc
}

// newScripts compiles the scripts, the job transitions with jobLib as their
// shared definitions (luaJobLib but in tests of broken variants).
func newScripts(jobLib string) *scripts {
	// Read-only transitions (list, stats, key get and list) are called
	// like the others, not with FCALL_RO: rueidis retries read-only
	// commands on network errors without end, and an unreachable server
	// must give a clear error here as everywhere else.
	lib, f := newJobLibrary(jobLib, map[string]string{
		"job_insert": luaJobInsert, "job_insert_one": luaJobInsertOne, "job_fetch": luaJobFetch, "job_extend": luaJobExtend,
		"job_finish": luaJobFinish, "job_retry": luaJobRetry, "job_delete": luaJobDelete, "job_cancel": luaJobCancel,
		"job_pause": luaJobPause, "job_list": luaJobList, "job_stats": luaJobStats,
		"key_setlimit": luaKeySetLimit, "key_get": luaKeyGet, "key_list": luaKeyList,
		"schedule_register": luaScheduleRegister, "schedule_list": luaScheduleList,
		"process_beat": luaProcessBeat, "process_remove": luaProcessRemove, "process_list": luaProcessList,
	})
	return &scripts{
		acquire:  compile(luaAcquire),
		release:  compile(luaRelease),
		extend:   compile(luaExtend),
		setLimit: compile(luaSetLimit),
		// Read-only, but not sent as EVALSHA_RO, for the reason above.
		inspect: compile(luaInspect),

		jobLib:    lib,
		jobInsert: f["job_insert"], jobInsertOne: f["job_insert_one"], jobFetch: f["job_fetch"], jobExtend: f["job_extend"],
		jobFinish: f["job_finish"], jobRetry: f["job_retry"], jobDelete: f["job_delete"], jobCancel: f["job_cancel"],
		jobPause: f["job_pause"], jobList: f["job_list"], jobStats: f["job_stats"],
		keySetLimit: f["key_setlimit"], keyGet: f["key_get"], keyList: f["key_list"],
		scheduleRegister: f["schedule_register"], scheduleList: f["schedule_list"],
		processBeat: f["process_beat"], processRemove: f["process_remove"], processList: f["process_list"],
	}
}

func compile(body string) *rueidis.Lua {
	src := luaLib + "\n" + body
	return registerScript(rueidis.NewLuaScript(src), src)
}

var defaultScripts = newScripts(luaJobLib)

// withOwnLibrary returns a copy of s whose job transitions keep a library
// state of their own (loads, the fallback to scripts): whether a server
// takes functions is a fact about a driver's server, not the process's.
func (s *scripts) withOwnLibrary() *scripts {
	c := *s
	c.jobLib = &jobLibrary{name: s.jobLib.name, src: s.jobLib.src}
	for _, f := range []**jobFunc{
		&c.jobInsert, &c.jobInsertOne, &c.jobFetch, &c.jobExtend, &c.jobFinish, &c.jobRetry,
		&c.jobDelete, &c.jobCancel, &c.jobPause, &c.jobList, &c.jobStats,
		&c.keySetLimit, &c.keyGet, &c.keyList,
		&c.scheduleRegister, &c.scheduleList,
		&c.processBeat, &c.processRemove, &c.processList,
	} {
		*f = &jobFunc{lib: c.jobLib, name: (*f).name, script: (*f).script}
	}
	return &c
}

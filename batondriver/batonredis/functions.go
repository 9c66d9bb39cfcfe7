package batonredis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// The job transitions run as one Redis function library: lua/joblib.lua's
// definitions once, at FUNCTION LOAD, and each transition a registered
// function called with FCALL. As plain scripts, every call would run all of
// joblib.lua's definitions again first, which costs more than most
// transitions' own work. The library's name carries a hash of its source,
// so processes of different versions sharing a server each call their own.
//
// The library is loaded on first use, on every node of a cluster, and again
// whenever a node answers that a function is missing (a restart without
// persistence, a failover to a replica that never had it). A server without
// functions (Redis < 7), or one that refuses the library, gets the same
// transitions as EVALSHA scripts.

// jobLibrary is the job transitions compiled both ways.
type jobLibrary struct {
	name string // baton_<hash>
	src  string // the FUNCTION LOAD source

	mu      sync.Mutex  // serialises loads
	useEval atomic.Bool // functions unavailable: scripts only
}

// jobFunc is one transition: a function of the library, and the same as
// a script.
type jobFunc struct {
	lib    *jobLibrary
	name   string       // the function's name
	script *rueidis.Lua // the EVALSHA fallback
}

// newJobLibrary builds the library of jobLib and the transitions, by file
// name without ".lua".
func newJobLibrary(jobLib string, transitions map[string]string) (*jobLibrary, map[string]*jobFunc) {
	var b strings.Builder
	b.WriteString(jobLib)
	names := make([]string, 0, len(transitions))
	for name := range transitions {
		names = append(names, name)
	}
	slices.Sort(names) // the same text, so the same hash, every time
	// The functions' names start with the library's, which is the hash of
	// the text: a placeholder stands for it until the hash is known.
	const placeholder = "@LIBRARY@"
	for _, name := range names {
		fmt.Fprintf(&b, "\nredis.register_function('%s_%s', function(KEYS, ARGV)\nbind(KEYS)\n%s\nend)\n",
			placeholder, name, transitions[name])
	}
	body := b.String()
	sum := sha1.Sum([]byte(body))
	libName := "baton_" + hex.EncodeToString(sum[:6])
	lib := &jobLibrary{name: libName, src: "#!lua name=" + libName + "\n" + strings.ReplaceAll(body, placeholder, libName)}
	funcs := make(map[string]*jobFunc, len(transitions))
	for _, name := range names {
		funcs[name] = &jobFunc{
			lib:    lib,
			name:   libName + "_" + name,
			script: rueidis.NewLuaScript(jobLib + "\nbind(KEYS)\n" + transitions[name]),
		}
	}
	return lib, funcs
}

// Exec runs the transition on the keys' slot, sent again while a Cluster
// refuses it with TRYAGAIN or CLUSTERDOWN (tryagain.go).
func (f *jobFunc) Exec(ctx context.Context, c rueidis.Client, keys, args []string) rueidis.RedisResult {
	res := f.exec(ctx, c, keys, args)
	if !isTryAgain(res.Error()) { // the common case, without a closure
		return res
	}
	return afterTryAgain(ctx, res, func() rueidis.RedisResult { return f.exec(ctx, c, keys, args) })
}

// exec runs the transition once.
func (f *jobFunc) exec(ctx context.Context, c rueidis.Client, keys, args []string) rueidis.RedisResult {
	if f.lib.useEval.Load() {
		return f.script.Exec(ctx, c, keys, args)
	}
	res := c.Do(ctx, f.call(c, keys, args))
	if !missingFunction(res.Error()) {
		return res
	}
	return f.afterMissing(ctx, c, keys, args)
}

// afterMissing runs the transition once an FCALL of it found the function
// missing: it loads the library and calls it again, or, where the server
// cannot take functions, runs it as a script from then on.
func (f *jobFunc) afterMissing(ctx context.Context, c rueidis.Client, keys, args []string) rueidis.RedisResult {
	if err := f.lib.load(ctx, c); err != nil {
		return f.script.Exec(ctx, c, keys, args)
	}
	return c.Do(ctx, f.call(c, keys, args))
}

// call is the FCALL of the transition, for callers that pipeline it.
func (f *jobFunc) call(c rueidis.Client, keys, args []string) rueidis.Completed {
	return c.B().Fcall().Function(f.name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// missingFunction reports an FCALL refused because the server does not
// have the function.
func missingFunction(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	// "unknown command": a server without functions (Redis < 7).
	return ok && (strings.Contains(e.Error(), "Function not found") || strings.Contains(e.Error(), "unknown command"))
}

// load loads the library on every node of c. A server that cannot take it
// (no FUNCTION command, or it refuses the code) makes the library fall back
// to scripts for good; a network error, or a node's passing state (out of
// memory, busy with a script, loading its data), is returned for the
// caller to fall back this once.
func (l *jobLibrary) load(ctx context.Context, c rueidis.Client) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, node := range c.Nodes() {
		err := node.Do(ctx, node.B().FunctionLoad().FunctionCode(l.src).Build()).Error()
		if err == nil {
			continue
		}
		e, ok := rueidis.IsRedisErr(err)
		switch {
		case ok && (strings.Contains(e.Error(), "already exists") || strings.HasPrefix(e.Error(), "READONLY")):
			// Loaded before; or a replica, which gets it from its master.
		case ok && !passingRefusal(e.Error()):
			l.useEval.Store(true)
			return err
		default:
			return err
		}
	}
	return nil
}

// passingRefusal reports whether msg, a server's error, tells of a
// passing state of the node rather than a server that cannot take the
// library (rueidis strips the "ERR " of plain errors such as "unknown
// command" or code that does not compile; the others keep their codes).
func passingRefusal(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "OOM", "BUSY", "LOADING", "MISCONF", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS":
		return true
	}
	return false
}

// PruneFunctions deletes, on every master, the job function libraries of
// other Baton versions — those named baton_ and twelve hex digits, but
// this version's — and returns their names, sorted. Functions are part of
// the dataset: each version that ran leaves its library behind (tens of
// kilobytes) until it is deleted. A process of another version that still
// runs loads its library again at its next job call, so pruning is safe at
// any time, and best done once every process runs this version.
func (d *Driver) PruneFunctions(ctx context.Context) ([]string, error) {
	keep := d.scripts.jobLib.name
	var deleted []string
	for addr, node := range d.client.Nodes() {
		libs, err := node.Do(ctx, node.B().FunctionList().Libraryname("baton_*").Build()).ToArray()
		if err != nil {
			return nil, fmt.Errorf("batonredis: prune functions on %s: %w", addr, err)
		}
		for _, lib := range libs {
			m, err := lib.AsMap()
			if err != nil {
				return nil, fmt.Errorf("batonredis: prune functions on %s: %w", addr, err)
			}
			field := m["library_name"]
			name, err := field.ToString()
			if err != nil {
				return nil, fmt.Errorf("batonredis: prune functions on %s: %w", addr, err)
			}
			if name == keep || !isJobLibraryName(name) {
				continue
			}
			err = node.Do(ctx, node.B().FunctionDelete().LibraryName(name).Build()).Error()
			if e, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(e.Error(), "READONLY") {
				break // a replica: its master's delete reaches it
			}
			if err != nil {
				return nil, fmt.Errorf("batonredis: prune functions on %s: delete %s: %w", addr, name, err)
			}
			deleted = append(deleted, name)
		}
	}
	slices.Sort(deleted)
	return slices.Compact(deleted), nil
}

// isJobLibraryName reports whether name is what newJobLibrary names a
// library: "baton_" and twelve lowercase hex digits.
func isJobLibraryName(name string) bool {
	hash, ok := strings.CutPrefix(name, "baton_")
	if !ok || len(hash) != 12 {
		return false
	}
	_, err := hex.DecodeString(hash)
	return err == nil && strings.ToLower(hash) == hash
}

// Package redisstat reads a Redis server's counters for the benchmark
// commands: INFO stats, commandstats and CPU, sampled before and after a
// measured window (Window), and deletes a finished cell's keys.
package redisstat

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batonhq/baton/bench/internal/loadgen"
)

// Reader reads the server's counters over a connection of its own.
type Reader struct {
	c *redis.Client
}

// NewReader connects a Reader to the server at addr and pings it.
func NewReader(addr string) (*Reader, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &Reader{c: c}, nil
}

// Close closes the Reader's connection.
func (s *Reader) Close() { s.c.Close() }

// Version returns the server's redis_version as INFO server gives it.
func (s *Reader) Version(ctx context.Context) (string, error) {
	info, err := s.c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return field(info, "redis_version"), nil
}

// Ping times nothing itself; it sends one PING.
func (s *Reader) Ping(ctx context.Context) error { return s.c.Ping(ctx).Err() }

// ServerVersion reports the server's version as INFO gives it, falling back
// to the redis-server binary's --version line, then to "unknown".
func ServerVersion(ctx context.Context, s *Reader) string {
	if v, err := s.Version(ctx); err == nil && v != "" {
		return v
	}
	out, err := exec.Command("redis-server", "--version").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

// Snap is one reading of the server's counters, or the growth between two.
type Snap struct {
	// Client is the number of commands the measured clients issued
	// (package cmdcount); only a window's delta sets it.
	Client int64
	// Total is INFO stats total_commands_processed. On Redis 7.0 it counts
	// the commands clients send AND every redis.call run inside a script.
	Total int64
	// Calls is the sum of the calls of every INFO commandstats entry but
	// cmdstat_info: also client commands plus those run inside scripts.
	Calls int64
	// CPU is the server's used_cpu_user + used_cpu_sys, in seconds.
	CPU float64
	// Cmds are the commandstats entries by command name.
	Cmds map[string]CmdStat
}

// CmdStat is one INFO commandstats entry.
type CmdStat struct {
	// Calls is the entry's calls.
	Calls int64
	// Usec is the entry's usec: the server time of all its calls.
	Usec int64
}

// Snap reads the counters. The INFO command itself is counted in Total by
// the next Snap; Sub removes it.
func (s *Reader) Snap(ctx context.Context) (Snap, error) {
	info, err := s.c.Info(ctx, "stats", "commandstats", "cpu").Result()
	if err != nil {
		return Snap{}, err
	}
	r := Snap{Cmds: map[string]CmdStat{}}
	r.Total, _ = strconv.ParseInt(field(info, "total_commands_processed"), 10, 64)
	user, _ := strconv.ParseFloat(field(info, "used_cpu_user"), 64)
	sys, _ := strconv.ParseFloat(field(info, "used_cpu_sys"), 64)
	r.CPU = user + sys
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		st := CmdStat{Calls: kv(rest, "calls"), Usec: kv(rest, "usec")}
		r.Calls += st.Calls
		r.Cmds[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return r, nil
}

// Sub returns the counters' growth from before to r, less the INFO that
// took the before reading.
func (r Snap) Sub(before Snap) Snap {
	d := Snap{
		Total: r.Total - before.Total - 1,
		Calls: r.Calls - before.Calls,
		CPU:   r.CPU - before.CPU,
		Cmds:  map[string]CmdStat{},
	}
	for name, st := range r.Cmds {
		b := before.Cmds[name]
		if st.Calls > b.Calls {
			d.Cmds[name] = CmdStat{Calls: st.Calls - b.Calls, Usec: st.Usec - b.Usec}
		}
	}
	return d
}

// Add adds the counters of o to r, making r.Cmds if it is nil: how a
// cell's rounds are summed, from a zero Snap.
func (r *Snap) Add(o Snap) {
	if r.Cmds == nil {
		r.Cmds = map[string]CmdStat{}
	}
	r.Client += o.Client
	r.Total += o.Total
	r.Calls += o.Calls
	r.CPU += o.CPU
	for name, st := range o.Cmds {
		a := r.Cmds[name]
		r.Cmds[name] = CmdStat{Calls: a.Calls + st.Calls, Usec: a.Usec + st.Usec}
	}
}

// Window measures the growth of the server's counters, of the measured
// clients' command count (package cmdcount) and of this process's CPU time
// across a measured window, from Start to End.
type Window struct {
	// Stats reads the server's counters.
	Stats *Reader
	// Sent is the measured clients' command counter.
	Sent *atomic.Int64
	// Delta is the counters' growth, Client set, after End.
	Delta Snap
	// CPU is this process's CPU time in the window, after End.
	CPU time.Duration

	before     Snap
	sentBefore int64
	cpuBefore  time.Duration
}

// Start opens the window: it reads the counters, then this process's CPU.
func (w *Window) Start(ctx context.Context) error {
	s, err := w.Stats.Snap(ctx)
	w.before, w.sentBefore, w.cpuBefore = s, w.Sent.Load(), loadgen.ProcessCPU()
	return err
}

// End closes the window and sets Delta and CPU.
func (w *Window) End(ctx context.Context) error {
	w.CPU = loadgen.ProcessCPU() - w.cpuBefore
	sent := w.Sent.Load()
	s, err := w.Stats.Snap(ctx)
	if err != nil {
		return err
	}
	w.Delta = s.Sub(w.before)
	w.Delta.Client = sent - w.sentBefore
	return nil
}

// Describe lists the commands of a delta, most calls first, with their
// calls per op and server time per call: "evalsha 2.00 x 27.1µs, ...".
func (r Snap) Describe(ops int64) string {
	names := slices.Collect(maps.Keys(r.Cmds))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(r.Cmds[b].Calls, r.Cmds[a].Calls) })
	var parts []string
	for _, n := range names {
		st := r.Cmds[n]
		if st.Calls <= 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f x %.1fµs", n, float64(st.Calls)/float64(ops), float64(st.Usec)/float64(st.Calls)))
	}
	return strings.Join(parts, ", ")
}

// CheckCounters warns on stderr when the two server-side counts of calls
// disagree by more than 1%, which would make a table's column ambiguous.
func CheckCounters(r *Snap) {
	if d := r.Total - r.Calls; d*100 > r.Total || -d*100 > r.Total {
		fmt.Fprintf(os.Stderr, "warning: total_commands_processed %d and commandstats calls %d disagree\n", r.Total, r.Calls)
	}
}

// field returns the value of "name:value" in an INFO reply.
func field(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// kv returns the integer value of key in "a=1,b=2".
func kv(s, key string) int64 {
	for part := range strings.SplitSeq(s, ",") {
		if v, ok := strings.CutPrefix(part, key+"="); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(n)
		}
	}
	return 0
}

// DeleteKeys deletes the keys of database db that match pattern, with SCAN
// and UNLINK on a connection of its own: how a cell's keys are removed
// after it, outside every measured window. It returns how many it deleted.
func DeleteKeys(ctx context.Context, addr string, db int, pattern string) (int, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, PoolSize: 1})
	defer c.Close()
	n := 0
	var cursor uint64
	for range maxScanRounds {
		keys, next, err := c.Scan(ctx, cursor, pattern, 5000).Result()
		if err != nil {
			return n, err
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return n, err
			}
			n += len(keys)
		}
		if cursor = next; cursor == 0 {
			return n, nil
		}
	}
	return n, fmt.Errorf("deleting %s in db %d: still scanning after %d rounds", pattern, db, maxScanRounds)
}

// maxScanRounds bounds DeleteKeys: 5000 slots a round, ample for the
// millions of keys a run can leave.
const maxScanRounds = 100000

// Scripts sums the commandstats entries of script and function calls —
// EVALSHA, EVAL and FCALL (Baton's job transitions run as functions) — the
// commands they run inside included in Usec.
func (s Snap) Scripts() CmdStat {
	var c CmdStat
	for _, name := range []string{"evalsha", "eval", "fcall"} {
		c.Calls += s.Cmds[name].Calls
		c.Usec += s.Cmds[name].Usec
	}
	return c
}

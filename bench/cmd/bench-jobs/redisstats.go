package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// statsReader reads the server's counters over a connection of its own.
type statsReader struct {
	c *redis.Client
}

func newStatsReader(addr string) (*statsReader, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	if err := c.Ping(context.Background()).Err(); err != nil {
		c.Close()
		return nil, err
	}
	return &statsReader{c: c}, nil
}

func (s *statsReader) Close() { s.c.Close() }

func (s *statsReader) version(ctx context.Context) (string, error) {
	info, err := s.c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return field(info, "redis_version"), nil
}

// redisSnap is one reading of the server's counters.
type redisSnap struct {
	// client is the number of commands the measured clients issued
	// (count.go); only a window's delta sets it.
	client int64
	// total is INFO stats total_commands_processed. On Redis 7.0 it counts
	// the commands clients send AND every redis.call run inside a script.
	total int64
	// calls is the sum of the calls of every INFO commandstats entry but
	// cmdstat_info: also client commands plus those run inside scripts.
	calls int64
	// cpu is the server's used_cpu_user + used_cpu_sys, in seconds.
	cpu float64
	// cmds are the commandstats entries by command name.
	cmds map[string]cmdStat
}

// cmdStat is one INFO commandstats entry.
type cmdStat struct{ calls, usec int64 }

// snap reads the counters. The INFO command itself is counted in total by
// the next snap; sub removes it.
func (s *statsReader) snap(ctx context.Context) (redisSnap, error) {
	info, err := s.c.Info(ctx, "stats", "commandstats", "cpu").Result()
	if err != nil {
		return redisSnap{}, err
	}
	r := redisSnap{cmds: map[string]cmdStat{}}
	r.total, _ = strconv.ParseInt(field(info, "total_commands_processed"), 10, 64)
	user, _ := strconv.ParseFloat(field(info, "used_cpu_user"), 64)
	sys, _ := strconv.ParseFloat(field(info, "used_cpu_sys"), 64)
	r.cpu = user + sys
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75,...
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		st := cmdStat{calls: kv(rest, "calls"), usec: kv(rest, "usec")}
		r.calls += st.calls
		r.cmds[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return r, nil
}

// sub returns the counters' growth from before to r, less the INFO that
// took the before reading.
func (r redisSnap) sub(before redisSnap) redisSnap {
	d := redisSnap{
		total: r.total - before.total - 1,
		calls: r.calls - before.calls,
		cpu:   r.cpu - before.cpu,
		cmds:  map[string]cmdStat{},
	}
	for name, st := range r.cmds {
		b := before.cmds[name]
		if st.calls > b.calls {
			d.cmds[name] = cmdStat{calls: st.calls - b.calls, usec: st.usec - b.usec}
		}
	}
	return d
}

// add adds the counters of o to r.
func (r *redisSnap) add(o redisSnap) {
	r.client += o.client
	r.total += o.total
	r.calls += o.calls
	r.cpu += o.cpu
	for name, st := range o.cmds {
		a := r.cmds[name]
		r.cmds[name] = cmdStat{calls: a.calls + st.calls, usec: a.usec + st.usec}
	}
}

// describe lists the commands of a delta, most calls first, with their
// calls per op and server time per call: "evalsha 2.00 x 27.1µs, ...".
func (r redisSnap) describe(ops int64) string {
	names := slices.Collect(maps.Keys(r.cmds))
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(r.cmds[b].calls, r.cmds[a].calls) })
	var parts []string
	for _, n := range names {
		st := r.cmds[n]
		if st.calls <= 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f x %.1fµs", n, float64(st.calls)/float64(ops), float64(st.usec)/float64(st.calls)))
	}
	return strings.Join(parts, ", ")
}

// deleteKeys deletes the keys of database db that match pattern, with SCAN
// and UNLINK on a connection of its own: how a cell's keys are removed
// after it, outside every measured window. It returns how many it deleted.
func deleteKeys(ctx context.Context, addr string, db int, pattern string) (int, error) {
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

// maxScanRounds bounds deleteKeys: 5000 slots a round, ample for the
// millions of keys a run can leave.
const maxScanRounds = 100000

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

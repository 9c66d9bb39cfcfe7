package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/batonhq/baton/batondriver"
	"github.com/batonhq/baton/bench/internal/cmdcount"
	"github.com/batonhq/baton/bench/internal/jobcell"
	"github.com/batonhq/baton/bench/internal/loadgen"
	"github.com/batonhq/baton/bench/internal/redisstat"
	"github.com/batonhq/baton/bench/internal/table"
	"github.com/batonhq/baton/internal/jobid"
)

// floorLibrary is the bench's own function library, loaded on the private
// server for table 4c. Each function takes the KEYS and ARGV of Baton's
// insert of one plain job (job_insert_one.lua): the queue's meta hash, the
// prefix of its available lists, its wake list and the job's key; the
// job's ID, kind, args, priority, max attempts, tags and metadata.
// benchfloor_empty does nothing; benchfloor_commands runs the four
// commands job_insert_one runs (TIME, the job's HSET, RPUSH onto its
// priority's list, LPUSH of a wake token) with none of its other Lua;
// benchfloor_zset runs the five that the same insert ran before 3c0fdd5,
// when available jobs were one sorted set: TIME, the HSET, HINCRBY of the
// arrival number, ZADD, LPUSH wake.
const floorLibrary = `#!lua name=benchfloor
redis.register_function('benchfloor_empty', function(KEYS, ARGV)
  return 1
end)
local function now()
  local t = redis.call('TIME')
  return string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
end
redis.register_function('benchfloor_commands', function(KEYS, ARGV)
  local at = now()
  redis.call('HSET', KEYS[4], 'kind', ARGV[2], 'args', ARGV[3], 'prio', ARGV[4],
    'attempt', '0', 'max', ARGV[5], 'created', at, 'state', 'available', 'run_at', at)
  redis.call('RPUSH', KEYS[2] .. ARGV[4], ARGV[1])
  redis.call('LPUSH', KEYS[3], '1')
  return 1
end)
redis.register_function('benchfloor_zset', function(KEYS, ARGV)
  local at = now()
  redis.call('HSET', KEYS[4], 'kind', ARGV[2], 'args', ARGV[3], 'prio', ARGV[4],
    'attempt', '0', 'max', ARGV[5], 'created', at, 'state', 'available', 'run_at', at)
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('ZADD', string.sub(KEYS[2], 1, -2), tonumber(ARGV[4]) * 4398046511104 + seq, ARGV[1])
  redis.call('LPUSH', KEYS[3], '1')
  return 1
end)
`

// floorFcall is the FCALL of function fn with what the driver sends to
// insert one plain job due now into queue under key prefix prefix: the
// four keys and seven arguments of job_insert_one.lua, as batonredis's
// JobInsert makes them for the jobs of part 4.
func floorFcall(c rueidis.Client, fn, prefix, queue string, args []byte) rueidis.Completed {
	base := prefix + ":queue:{" + queue + "}:"
	id := jobid.New()
	return c.B().Fcall().Function(fn).Numkeys(4).Key(base+"meta", base+"available:", base+"wake", base+"job:"+id).
		Arg(id, "bench", string(args), "1", "25", "", "").Build()
}

// insertFloor prints table 4c: what one insert from one goroutine costs,
// from asynq's Enqueue through an FCALL that does nothing and one that runs
// only job_insert's commands to Baton's job_insert through the driver. The
// rows take turns, floorRounds rounds of e.p.floorCalls calls each after a
// warm-up round, and the median round is shown, as in roundTripFloor.
func insertFloor(ctx context.Context, e *env) error {
	const floorRounds, prefix = 7, "bjf"
	calls := e.p.floorCalls
	t := &table.Table{
		Title: fmt.Sprintf("4c. The floor under one insert from one goroutine: calls one after the other (median of %d rounds of %d, rows interleaved)",
			floorRounds, calls),
		Header: []string{"row", "server µs/call", "round trip", "rounds", "bench CPU µs/call"},
	}

	var sent atomic.Int64
	rc, err := cmdcount.NewRueidis(e.addr, &sent)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := rc.Do(ctx, rc.B().FunctionLoad().Replace().FunctionCode(floorLibrary).Build()).Error(); err != nil {
		return fmt.Errorf("loading benchfloor: %w", err)
	}
	defer func() {
		_ = rc.Do(context.Background(), rc.B().FunctionDelete().LibraryName("benchfloor").Build()).Error()
	}()
	b, err := jobcell.NewBaton(e.addr, prefix)
	if err != nil {
		return err
	}
	defer b.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, 0, b.Keys()) }()
	a := jobcell.NewAsynq(e.addr, "floor")
	defer a.Close()
	defer func() { _, _ = redisstat.DeleteKeys(context.Background(), e.addr, jobcell.AsynqDB, a.Keys()) }()

	args, _ := json.Marshal(benchArgs{I: 1})
	rows := []struct {
		name string
		cmd  string // the commandstats entry of its calls
		call func() error
	}{
		{"asynq Enqueue", "evalsha", func() error { return a.Enqueue(ctx, benchArgs{I: 1}) }},
		{"FCALL empty", "fcall", func() error {
			return rc.Do(ctx, floorFcall(rc, "benchfloor_empty", prefix, "empty", args)).Error()
		}},
		{"FCALL commands only", "fcall", func() error {
			return rc.Do(ctx, floorFcall(rc, "benchfloor_commands", prefix, "commands", args)).Error()
		}},
		{"FCALL sorted-set model", "fcall", func() error {
			return rc.Do(ctx, floorFcall(rc, "benchfloor_zset", prefix, "zset", args)).Error()
		}},
		{"baton job_insert (driver)", "fcall", func() error {
			_, err := b.Driver.JobInsert(ctx, &batondriver.JobInsertParams{Queue: "baton",
				Jobs: []*batondriver.JobInsert{{Kind: "bench", Args: args, Priority: 1, MaxAttempts: 25}}})
			return err
		}},
	}
	rtts := make([][]float64, len(rows)) // µs, per round
	cpus := make([][]float64, len(rows))
	server := make([]redisstat.CmdStat, len(rows)) // summed over the measured rounds
	for round := range floorRounds + 1 {
		for i, r := range rows {
			before, err := e.stats.Snap(ctx)
			if err != nil {
				return err
			}
			cpu0, t0 := loadgen.ProcessCPU(), time.Now()
			for range calls {
				if err := r.call(); err != nil {
					return fmt.Errorf("%s: %w", r.name, err)
				}
			}
			rtt, cpu := time.Since(t0), loadgen.ProcessCPU()-cpu0
			after, err := e.stats.Snap(ctx)
			if err != nil {
				return err
			}
			if round == 0 {
				continue // warm-up: loads asynq's script, adds the queues to their sets
			}
			st := after.Sub(before).Cmds[r.cmd]
			if st.Calls != int64(calls) {
				return fmt.Errorf("%s: %d %s calls in a round of %d", r.name, st.Calls, r.cmd, calls)
			}
			server[i].Calls += st.Calls
			server[i].Usec += st.Usec
			rtts[i] = append(rtts[i], float64(rtt.Microseconds())/float64(calls))
			cpus[i] = append(cpus[i], cpu.Seconds()*1e6/float64(calls))
		}
	}
	for i, r := range rows {
		t.Add(r.name, table.Float(float64(server[i].Usec)/float64(server[i].Calls), 1),
			table.Float(loadgen.Median(rtts[i]), 1)+"µs", table.Float(slices.Min(rtts[i]), 0)+".."+table.Float(slices.Max(rtts[i]), 0)+"µs",
			table.Float(loadgen.Median(cpus[i]), 1))
	}
	t.Note("asynq Enqueue:       asynq's Client enqueueing one task (go-redis; one EVALSHA), database 1, a queue of its own.")
	t.Note("FCALL empty:         a function of the bench's library that returns 1 (rueidis), with the KEYS and ARGV of")
	t.Note("                     Baton's insert of one plain job (job_insert_one): 4 keys, 7 arguments.")
	t.Note("FCALL commands only: the same call to a function running job_insert_one's commands and nothing else:")
	t.Note("                     TIME, HSET of 8 fields, RPUSH onto the priority's available list, LPUSH wake.")
	t.Note("FCALL sorted-set model: not Baton since 3c0fdd5: the same call to a function running the commands of the")
	t.Note("                     insert when available jobs were one sorted set: TIME, the HSET, HINCRBY seq, ZADD, LPUSH wake.")
	t.Note("baton job_insert:    batonredis's Driver.JobInsert of one job (no Client), as in \"insert x1\" above.")
	t.Note("server µs/call:      INFO commandstats usec per call of fcall (evalsha for asynq), in-script commands included,")
	t.Note("                     over the measured rounds. round trip: mean call as the client saw it, median round.")
	t.Note("All rows run on the same server in one run, each on keys of its own. The rows after the empty FCALL add")
	t.Note("one job per call, each to a queue of its own: they hold as many jobs in every round.")
	t.Print(os.Stdout)
	return nil
}

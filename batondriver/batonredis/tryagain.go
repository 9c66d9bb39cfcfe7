package batonredis

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// While a Cluster moves a slot from one master to another (CLUSTER SETSLOT
// MIGRATING and IMPORTING, then MIGRATE of its keys a few at a time), both
// masters refuse a command of several keys in that slot with TRYAGAIN
// unless the one it reaches holds all of them. Every transition here is
// such a command, and the job transitions name a few keys that never
// exist (the prefixes of the job and concurrency-key names, which they
// build keys from): so a queue's job calls are refused for the whole move
// of its slot, a lock's as long as its keys are split. That is what keeps
// them safe — a job script run on the source would not see the job hashes
// already moved — but rueidis sends such a command again only if it is
// read-only, and no transition is. A refused command ran nothing, so the
// driver sends it again itself, after a short pause that doubles up to
// tryAgainMaxPause, until the move is over or the call's context ends
// (then its error is the TRYAGAIN). ASK, for a key already moved, rueidis
// follows by itself.

const (
	tryAgainFirstPause = 5 * time.Millisecond
	tryAgainMaxPause   = 100 * time.Millisecond
)

// isTryAgain reports whether err is a Cluster's TRYAGAIN.
func isTryAgain(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && e.IsTryAgain()
}

// afterTryAgain returns res, the result of a command, or, while it is a
// TRYAGAIN and ctx has not ended, the result of send after a pause.
func afterTryAgain(ctx context.Context, res rueidis.RedisResult, send func() rueidis.RedisResult) rueidis.RedisResult {
	pause := tryAgainFirstPause
	for isTryAgain(res.Error()) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return res
		case <-t.C:
		}
		pause = min(2*pause, tryAgainMaxPause)
		res = send()
	}
	return res
}

// execLua runs s as s.Exec does, sent again while refused with TRYAGAIN.
func execLua(ctx context.Context, c rueidis.Client, s *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	send := func() rueidis.RedisResult { return s.Exec(ctx, c, keys, args) }
	return afterTryAgain(ctx, send(), send)
}

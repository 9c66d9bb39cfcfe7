package batonredis

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// A Cluster refuses commands, before running them, in two passing states
// that a caller can wait out:
//
//   - TRYAGAIN, while it moves a slot from one master to another (CLUSTER
//     SETSLOT MIGRATING and IMPORTING, then MIGRATE of its keys a few at a
//     time): both masters refuse a command of several keys in that slot
//     unless the one it reaches holds all of them. Every transition here
//     is such a command, and the job transitions name a few keys that
//     never exist (the prefixes of the job and concurrency-key names,
//     which they build keys from; a lock's tag, lockKeys): so a queue's
//     job calls and a lock's calls are refused for the whole move of its
//     slot. That is what keeps them safe — a job script run on the source
//     would not see the job hashes already moved, and Redis aborts a
//     script half done when it writes a key of a migrating slot that is
//     missing (one it emptied itself, say). (ASK, for a key already moved,
//     rueidis follows by itself.)
//   - CLUSTERDOWN, while a slot has no master: from when the others mark a
//     failed master so until its replica is promoted, every node refuses
//     every command (cluster-require-full-coverage, the default), those of
//     queues and locks on the masters still up too.
//
// rueidis sends such a command again only if it is read-only, and no
// transition is. A refused command ran nothing, so the driver sends it
// again itself, after a short pause that doubles up to tryAgainMaxPause,
// until the cluster takes it, the call's context ends or tryAgainLimit has
// passed (then its error is the refusal): a call without a deadline is not
// held for good by a cluster that stays down.

const (
	tryAgainFirstPause = 5 * time.Millisecond
	tryAgainMaxPause   = 100 * time.Millisecond
)

// tryAgainLimit is a variable for TestTryAgainGivesUpWithoutADeadline.
var tryAgainLimit = 30 * time.Second

// isTryAgain reports whether err is a Cluster's TRYAGAIN or CLUSTERDOWN.
func isTryAgain(err error) bool {
	e, ok := rueidis.IsRedisErr(err)
	return ok && (e.IsTryAgain() || e.IsClusterDown())
}

// afterTryAgain returns res, the result of a command, or, while it is a
// TRYAGAIN or CLUSTERDOWN, ctx has not ended and tryAgainLimit has not
// passed since the first, the result of send after a pause.
func afterTryAgain(ctx context.Context, res rueidis.RedisResult, send func() rueidis.RedisResult) rueidis.RedisResult {
	pause := tryAgainFirstPause
	var limit time.Time
	for isTryAgain(res.Error()) {
		if limit.IsZero() {
			limit = time.Now().Add(tryAgainLimit)
		} else if time.Now().After(limit) {
			return res
		}
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

// execLua runs s as s.Exec does, sent again while refused with TRYAGAIN or
// CLUSTERDOWN.
func execLua(ctx context.Context, c rueidis.Client, s *rueidis.Lua, keys, args []string) rueidis.RedisResult {
	res := s.Exec(ctx, c, keys, args)
	if !isTryAgain(res.Error()) { // the common case, without a closure
		return res
	}
	return afterTryAgain(ctx, res, func() rueidis.RedisResult { return s.Exec(ctx, c, keys, args) })
}

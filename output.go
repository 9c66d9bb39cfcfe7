package baton

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/batonhq/baton/batondriver"
)

// MaxOutputLen is the most bytes of JSON one job's output may take
// (RecordOutput): 64 KiB.
const MaxOutputLen = batondriver.MaxOutputLen

// ErrNoAttempt is returned by RecordOutput called with a context that is
// not a job handler's.
var ErrNoAttempt = errors.New("baton: not in a job's attempt: RecordOutput takes the context its handler was given")

// outputKey is the context key of an attempt's output.
type outputKey struct{}

// attemptOutput is what an attempt recorded with RecordOutput; the last
// call wins.
type attemptOutput struct {
	mu   sync.Mutex
	data []byte
}

func (o *attemptOutput) get() []byte {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.data
}

// RecordOutput records output, encoded as JSON, as the result of the job
// whose handler was given ctx (or a context made from it): it is stored
// with the job when the attempt completes — the handler returns nil, or
// JobAgain or JobAgainIn, which complete a run — and it is what JobGet and
// JobList return as JobRow.Output, `baton jobs show` prints and the
// dashboard's job page shows, for as long as the job is kept
// (Config.CompletedRetention; a job run again keeps it until a later run
// records another). A later call in the same attempt replaces it; an
// attempt that fails, snoozes or is cancelled stores none, and leaves an
// earlier run's output as it was.
//
// It returns ErrNoAttempt for a context that is not a handler's, an error
// from encoding, or one saying so if the JSON is over MaxOutputLen bytes;
// then nothing is recorded, and an earlier call's output stands.
func RecordOutput(ctx context.Context, output any) error {
	o, _ := ctx.Value(outputKey{}).(*attemptOutput)
	if o == nil {
		return ErrNoAttempt
	}
	data, err := json.Marshal(output)
	if err != nil {
		return fmt.Errorf("baton: record output: %w", err)
	}
	if len(data) > MaxOutputLen {
		return fmt.Errorf("baton: record output: %d bytes of JSON, over MaxOutputLen (%d)", len(data), MaxOutputLen)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.data = data
	return nil
}

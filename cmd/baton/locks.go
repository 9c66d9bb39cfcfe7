package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/batonlock"
)

func newLocksCmd(a *app) *cobra.Command {
	return group("locks", "List and inspect standalone locks (package batonlock)", a.locksListCmd(), a.locksShowCmd())
}

// lockOut is a lock key as `locks show` and `locks list` print it.
type lockOut struct {
	Key string `json:"key"`
	// KeyBase64 is the key's bytes when they are not valid UTF-8, which a
	// JSON string cannot carry exactly.
	KeyBase64 string `json:"key_base64,omitempty"`
	// Limit is the key's number of slots; Override says it was set with
	// SetLimit (0 then halts the key) rather than by the last acquirer.
	Limit       int         `json:"limit"`
	Override    bool        `json:"override"`
	LastFence   uint64      `json:"last_fence"`
	Holders     []holderOut `json:"holders"`
	Waiters     []waiterOut `json:"waiters"`
	WaiterCount int         `json:"waiter_count"`
}

type holderOut struct {
	Token string `json:"token"`
	Fence uint64 `json:"fence"`
	// TTLMillis is how long the lease has left.
	TTLMillis int64 `json:"ttl_ms"`
}

type waiterOut struct {
	Token string `json:"token"`
	// TTLMillis is how long the waiter's place is kept without a refresh.
	TTLMillis int64 `json:"ttl_ms"`
}

func (a *app) locksShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "show KEY",
		Short: "Show a lock key's limit, holders and waiters",
		Long: `Show a standalone lock key (batonlock): its limit and where the limit comes from,
the last fencing token issued, the holders with their leases' time left, and the
waiters in the order they will be granted (Redis lists the first 1000). A key with
no holder, waiter or stored limit — never used, or idle long enough that the backend
dropped its state — is not found (exit code 3).`,
		RunE: a.action(1, 1, func(ctx context.Context, b *backend, args []string) error {
			if n := len(args[0]); n == 0 || n > batonlock.MaxKeyLen {
				return usageErr("bad KEY: a lock key has 1 to %d bytes, not %d", batonlock.MaxKeyLen, n)
			}
			info, err := b.locker.Inspect(ctx, args[0])
			if err != nil {
				return err
			}
			if info.LastFence == 0 && info.Limit == 0 && !info.Override && len(info.Holders) == 0 && info.WaiterCount == 0 {
				return notFoundErr("lock key %q not found: no holder, waiter or stored limit (never used, or idle)", args[0])
			}
			return a.emit(toLockOut(info), func(w io.Writer) { lockTable(w, info) })
		}),
	}
}

func toLockOut(info *batonlock.Info) *lockOut {
	out := &lockOut{
		Key: info.Key, Limit: info.Limit, Override: info.Override, LastFence: info.LastFence,
		Holders: []holderOut{}, Waiters: []waiterOut{}, WaiterCount: info.WaiterCount,
	}
	for _, h := range info.Holders {
		out.Holders = append(out.Holders, holderOut{Token: h.Token, Fence: h.Fence, TTLMillis: h.TTL.Milliseconds()})
	}
	for _, w := range info.Waiters {
		out.Waiters = append(out.Waiters, waiterOut{Token: w.Token, TTLMillis: w.TTL.Milliseconds()})
	}
	if !utf8.ValidString(info.Key) {
		out.KeyBase64 = base64.StdEncoding.EncodeToString([]byte(info.Key))
	}
	return out
}

func lockTable(w io.Writer, info *batonlock.Info) {
	limit := fmt.Sprintf("%d (the last acquirer's)", info.Limit)
	if info.Override {
		limit = fmt.Sprintf("%d (set with SetLimit)", info.Limit)
		if info.Limit == 0 {
			limit = "0 (set with SetLimit: the key is halted)"
		}
	}
	row(w, "Key:", keyText(info.Key))
	row(w, "Limit:", limit)
	row(w, "Last fence:", info.LastFence)
	row(w, "Holders:", len(info.Holders))
	for _, h := range info.Holders {
		row(w, "", fmt.Sprintf("fence %d", h.Fence), "token "+clip(h.Token, 9), "expires in "+ttl(h.TTL))
	}
	row(w, "Waiters:", info.WaiterCount)
	for i, wt := range info.Waiters {
		row(w, "", fmt.Sprintf("#%d", i+1), "token "+clip(wt.Token, 9), "place kept "+ttl(wt.TTL))
	}
	if len(info.Waiters) < info.WaiterCount {
		row(w, "", fmt.Sprintf("(and %d more)", info.WaiterCount-len(info.Waiters)))
	}
}

func ttl(d time.Duration) string { return d.Round(time.Millisecond).String() }

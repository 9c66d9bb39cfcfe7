package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton"
	"github.com/batonhq/baton/batondriver"
)

// The per-key commands: `keys list`, `key show`, `limit set` and `limit
// reset`, over the concurrency keys of jobs (docs/concurrency.md). A key
// belongs to a queue, so each takes the queue first. A key may hold any
// bytes, spaces and braces included: it is always one argument, never
// split or parsed.

// keyOut is a concurrency key as `keys list` prints it.
type keyOut struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	// KeyBase64 is the key's bytes when they are not valid UTF-8, which a
	// JSON string cannot carry exactly.
	KeyBase64 string `json:"key_base64,omitempty"`
	// Limit is the override if Override, else the default limit of the
	// key's latest admitted or parked job; null when neither is known.
	Limit    *int `json:"limit"`
	Override bool `json:"override"`
	// Halted is an override of 0: no job of the key starts.
	Halted bool `json:"halted"`
	// Holding counts the jobs holding a slot: available or running.
	Holding int `json:"holding"`
	Running int `json:"running"`
	// Chained counts the jobs chained behind the running holders: running
	// too, but holding no slot until their holder finishes, and not parked.
	Chained int `json:"chained"`
	Parked  int `json:"parked"`
	// OldestParked is when the next parked job to run was parked.
	OldestParked *time.Time `json:"oldest_parked,omitempty"`
	LastFence    int64      `json:"last_fence"`
}

// keyShowOut is a key as `key show` and `limit set|reset` print it: with
// its holders.
type keyShowOut struct {
	keyOut
	Holders []keyHolderOut `json:"holders"`
}

// keyHolderOut is a job holding a slot of a key.
type keyHolderOut struct {
	ID    string         `json:"id"`
	State baton.JobState `json:"state"` // available or running
	Fence int64          `json:"fence,omitempty"`
	// LeaseUntil is when a running job's lease ends, and TTLMillis how long
	// it had left when read (negative: expired, to be taken back).
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
	TTLMillis  *int64     `json:"ttl_ms,omitempty"`
	// Next is the ID of the job chained behind this one, if any.
	Next string `json:"next,omitempty"`
}

// keyListOut is a page of keys as `keys list --json` prints it.
type keyListOut struct {
	Queue  string    `json:"queue"`
	Total  int       `json:"total"`
	Offset int       `json:"offset"`
	Keys   []*keyOut `json:"keys"`
}

func toKeyOut(info *baton.KeyInfo) *keyOut {
	out := &keyOut{
		Queue: info.Queue, Key: info.Key, Override: info.Override, Halted: info.Override && info.Limit == 0,
		Holding: info.Holding, Running: info.Running, Chained: info.Chained, Parked: info.Parked,
		OldestParked: timePtr(info.OldestParked), LastFence: info.Fence,
	}
	if !utf8.ValidString(info.Key) {
		out.KeyBase64 = base64.StdEncoding.EncodeToString([]byte(info.Key))
	}
	if info.Limit >= 0 {
		out.Limit = &info.Limit
	}
	return out
}

func toKeyShowOut(info *baton.KeyInfo, now time.Time) *keyShowOut {
	out := &keyShowOut{keyOut: *toKeyOut(info), Holders: []keyHolderOut{}}
	for _, h := range info.Holders {
		ho := keyHolderOut{ID: h.ID, State: h.State, Fence: h.Fence, LeaseUntil: timePtr(h.LeaseUntil), Next: h.Next}
		if !h.LeaseUntil.IsZero() {
			ms := h.LeaseUntil.Sub(now).Milliseconds()
			ho.TTLMillis = &ms
		}
		out.Holders = append(out.Holders, ho)
	}
	return out
}

func newKeysCmd(a *app) *cobra.Command {
	return group("keys", "List a queue's active concurrency keys", a.keysListCmd())
}

func newKeyCmd(a *app) *cobra.Command {
	return group("key", "Show one concurrency key with the jobs holding it", a.keyShowCmd())
}

func newLimitCmd(a *app) *cobra.Command {
	return group("limit", "Set or reset a concurrency key's limit, for every process",
		a.limitSetCmd(), a.limitResetCmd())
}

// keyArgsHelp ends the help of every command that takes a key.
const keyArgsHelp = `

KEY is one argument, whatever it holds: quote it for the shell if it has spaces,
braces or the like ('customer:{acme} eu'). One that starts with '-' goes after
'--': baton key show QUEUE -- -odd-key.`

func (a *app) keysListCmd() *cobra.Command {
	var page pageFlags
	cmd := &cobra.Command{
		Use:   "list QUEUE [--limit N] [--offset N]",
		Short: "List a queue's active concurrency keys, most parked first",
		Long: `List the active concurrency keys of QUEUE — those with jobs holding a slot, parked
jobs, or a limit override — most parked first, with:
  HOLDERS      jobs holding a slot: available or running
  RUNNING      the holders that are running
  CHAINED      jobs chained behind a running holder: running as well, on the
               holder's worker once it returns, holding no slot until then
  PARKED       jobs waiting for a slot, invisible to fetchers
  OLDEST WAIT  how long the next parked job to run has waited
  LIMIT        the key's limit: "(override)" when set with 'baton limit set',
               "halted" for an override of 0, else the default of its jobs
  LAST FENCE   the newest fencing token among the key's running jobs
  KEY          the key, last so that a long one does not push the table apart;
               quoted when it holds tabs, newlines or other unprintable bytes
An idle key keeps no state: it is not listed.`,
		RunE: a.action(1, 1, func(ctx context.Context, b *backend, args []string) error {
			queue := args[0]
			if err := requireQueue(ctx, b, queue); err != nil {
				return err
			}
			keys, total, err := b.client.KeyList(ctx, queue, &baton.KeyListOpts{Limit: page.limit, Offset: page.offset})
			if err != nil {
				return err
			}
			out := keyListOut{Queue: queue, Total: total, Offset: page.offset, Keys: make([]*keyOut, len(keys))}
			for i, k := range keys {
				out.Keys[i] = toKeyOut(k)
			}
			now := time.Now()
			return a.emit(out, func(w io.Writer) {
				if len(keys) == 0 {
					fmt.Fprintf(w, "no active keys in queue %s (%d in all)\n", queue, total)
					return
				}
				row(w, "HOLDERS", "RUNNING", "CHAINED", "PARKED", "OLDEST WAIT", "LIMIT", "LAST FENCE", "KEY")
				for _, k := range keys {
					row(w, k.Holding, k.Running, k.Chained, k.Parked, waited(k.OldestParked, now), limitText(k),
						fenceText(k.Fence), keyText(k.Key))
				}
				if shown := page.offset + len(keys); shown < total || page.offset > 0 {
					fmt.Fprintf(w, "(%d-%d of %d active keys%s)\n", page.offset+1, shown, total, more(shown, total))
				} else {
					fmt.Fprintf(w, "(%d active %s)\n", total, plural(total, "key", "keys"))
				}
			})
		}),
	}
	page.add(cmd, "keys")
	return cmd
}

func (a *app) keyShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show QUEUE KEY",
		Short: "Show a concurrency key: its limit, parked jobs and the jobs holding it",
		Long: `Show concurrency key KEY of QUEUE: what 'baton keys list' shows, and the jobs
holding a slot with their state, fencing token, the time their lease has left and
the job chained behind each (NEXT), which starts on the same worker as it returns.
A key that is not active in QUEUE (an idle key keeps no state) is not found (exit
code 3). 'baton jobs list -q QUEUE --key KEY' lists its parked jobs, next to run first.` + keyArgsHelp,
		RunE: a.action(2, 2, func(ctx context.Context, b *backend, args []string) error {
			info, err := getKey(ctx, b, args[0], args[1])
			if err != nil {
				return err
			}
			return a.emitKey(info, "")
		}),
	}
	cmd.SetFlagErrorFunc(dashHint)
	return cmd
}

func (a *app) limitSetCmd() *cobra.Command {
	var newKey bool
	cmd := &cobra.Command{
		Use:   "set QUEUE KEY N [--new-key]",
		Short: "Set a concurrency key's limit for every process; 0 halts the key",
		Long: `Store limit N for concurrency key KEY of QUEUE, for every process, overriding the
default limit its jobs carry. N is a whole number from 0: 0 halts the key.

Raising the limit promotes parked jobs at once. Lowering it lets running jobs
finish, and the job chained behind each of them (CHAINED in 'baton keys list'),
and sends the key's other jobs that have not started back to wait, at the head of
its parked jobs: once those have ended, at most N run. 'baton limit reset'
removes the override.

So that a typo cannot set the limit of a key nobody uses, KEY must have been used
in QUEUE (else exit code 3), unless --new-key is given: to halt or limit a key
before its first job.` + keyArgsHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			// The number is checked before anything connects: a bad one is
			// bad usage, whatever the state of Redis.
			if len(args) == 3 {
				_, err := parseLimit(args[2])
				return err
			}
			return nil
		},
		RunE: a.action(3, 3, func(ctx context.Context, b *backend, args []string) error {
			queue, key := args[0], args[1]
			n, err := parseLimit(args[2])
			if err != nil {
				return err
			}
			if err := checkKeyArgs(ctx, b, queue, key); err != nil {
				return err
			}
			if !newKey {
				_, err := b.client.KeyGet(ctx, queue, key)
				if errors.Is(err, baton.ErrKeyNotFound) {
					return notFoundErr("%v; add --new-key to set its limit before its first job", keyNotFound(queue, key))
				}
				if err != nil {
					return err
				}
			}
			info, err := b.client.SetLimit(ctx, queue, key, n)
			if err != nil {
				return err
			}
			what := fmt.Sprintf("limit of key %q in queue %s set to %d", key, queue, n)
			if n == 0 {
				what = fmt.Sprintf("key %q in queue %s halted: none of its jobs starts until 'baton limit set' raises the limit or 'baton limit reset'", key, queue)
				if info.Running > 0 {
					what += fmt.Sprintf("; %d running %s will finish", info.Running, plural(info.Running, "job", "jobs"))
				}
			}
			return a.emitKey(info, what)
		}),
	}
	cmd.Flags().BoolVar(&newKey, "new-key", false, "allow a key that is not active in QUEUE (has no jobs now)")
	cmd.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		// -3 reads as a flag; say what is wrong with it as a limit.
		if arg, ok := strings.CutPrefix(err.Error(), "unknown shorthand flag: "); ok {
			if _, num, ok := strings.Cut(arg, " in "); ok {
				if _, perr := strconv.ParseFloat(num, 64); perr == nil {
					_, err := parseLimit(num)
					return err
				}
			}
		}
		return dashHint(cmd, err)
	})
	return cmd
}

func (a *app) limitResetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset QUEUE KEY",
		Short: "Remove a concurrency key's limit override: its jobs' default applies again",
		Long: `Remove the limit override of concurrency key KEY of QUEUE, so that the default
limit its jobs carry applies again (promoting parked jobs if that is higher). A key
without an override is left as it is; a key that is not active in QUEUE is not found
(exit code 3).` + keyArgsHelp,
		RunE: a.action(2, 2, func(ctx context.Context, b *backend, args []string) error {
			queue, key := args[0], args[1]
			info, err := getKey(ctx, b, queue, key)
			if err != nil {
				return err
			}
			if !info.Override {
				return a.emitKey(info, fmt.Sprintf("key %q in queue %s has no limit override: nothing to reset", key, queue))
			}
			if info, err = b.client.ResetLimit(ctx, queue, key); err != nil {
				return err
			}
			what := fmt.Sprintf("limit override of key %q in queue %s removed: the limit is its jobs' default, %s", key, queue, limitText(info))
			if info.Limit < 0 {
				what = fmt.Sprintf("limit override of key %q in queue %s removed: its next job's default limit will apply", key, queue)
			}
			return a.emitKey(info, what)
		}),
	}
	cmd.SetFlagErrorFunc(dashHint)
	return cmd
}

// dashHint is the flag error of a command taking a key: cobra's, with a
// word on keys that start with '-'.
func dashHint(_ *cobra.Command, err error) error {
	if strings.HasPrefix(err.Error(), "unknown shorthand flag") || strings.HasPrefix(err.Error(), "unknown flag") {
		err = fmt.Errorf("%w (a KEY that starts with '-' goes after '--')", err)
	}
	return &exitError{code: exitUsage, err: err}
}

// parseLimit parses the N of `limit set`.
func parseLimit(s string) (int, error) {
	n, err := parseInt(s, 0, baton.MaxKeyLimit)
	if err != nil {
		return 0, usageErr("bad limit %q: want a whole number from 0 (0 halts the key) to %d", s, baton.MaxKeyLimit)
	}
	return n, nil
}

// checkKeyArgs checks a command's QUEUE and KEY: the queue must have had a
// job, the key must be one the backend can store.
func checkKeyArgs(ctx context.Context, b *backend, queue, key string) error {
	if err := batondriver.CheckKey(key); err != nil {
		return usageErr("bad KEY: it must have 1 to %d bytes, not %d", batondriver.MaxKeyLen, len(key))
	}
	return requireQueue(ctx, b, queue)
}

// getKey returns key of queue with its holders, or exitNotFound if the
// queue never had a job or the key is not active in it.
func getKey(ctx context.Context, b *backend, queue, key string) (*baton.KeyInfo, error) {
	if err := checkKeyArgs(ctx, b, queue, key); err != nil {
		return nil, err
	}
	info, err := b.client.KeyGet(ctx, queue, key)
	if errors.Is(err, baton.ErrKeyNotFound) {
		return nil, keyNotFound(queue, key)
	}
	return info, err
}

func keyNotFound(queue, key string) error {
	return notFoundErr("concurrency key %q not found in queue %q: it has no jobs and no limit override there (an idle key keeps no state)", key, queue)
}

// emitKey prints a key with its holders, after a line saying what was done
// (none if what is empty).
func (a *app) emitKey(info *baton.KeyInfo, what string) error {
	now := time.Now()
	return a.emit(toKeyShowOut(info, now), func(w io.Writer) {
		if what != "" {
			fmt.Fprintln(w, what)
			fmt.Fprintln(w)
		}
		keyTable(w, info, now)
	})
}

func keyTable(w io.Writer, info *baton.KeyInfo, now time.Time) {
	row(w, "Queue:", info.Queue)
	row(w, "Key:", keyText(info.Key))
	row(w, "Limit:", limitText(info))
	parked := fmt.Sprint(info.Parked)
	if info.Parked > 0 {
		parked += fmt.Sprintf(" (the next has waited %s)", waited(info.OldestParked, now))
	}
	row(w, "Parked:", parked)
	row(w, "Newest fence:", fenceText(info.Fence))
	row(w, "Holders:", fmt.Sprintf("%d (%d running)", info.Holding, info.Running))
	chained := fmt.Sprint(info.Chained)
	if info.Chained > 0 {
		chained += " (running behind a holder, without a slot until it returns)"
	}
	row(w, "Chained:", chained)
	if len(info.Holders) == 0 {
		return
	}
	row(w, "", "JOB", "STATE", "FENCE", "LEASE", "NEXT")
	for _, h := range info.Holders {
		lease := "-"
		if !h.LeaseUntil.IsZero() {
			if d := h.LeaseUntil.Sub(now); d >= 0 {
				lease = human(d) + " left"
			} else {
				lease = "expired " + human(d) + " ago (to be taken back)"
			}
		}
		row(w, "", h.ID, h.State, fenceText(h.Fence), lease, cmp.Or(h.Next, "-"))
	}
}

// limitText is a key's limit for a table: "3", "3 (override)", "halted",
// or "-" when no limit is known yet.
func limitText(info *baton.KeyInfo) string {
	switch {
	case info.Override && info.Limit == 0:
		return "halted"
	case info.Override:
		return fmt.Sprintf("%d (override)", info.Limit)
	case info.Limit < 0:
		return "-"
	}
	return strconv.Itoa(info.Limit)
}

func fenceText(f int64) string {
	if f == 0 {
		return "-"
	}
	return strconv.FormatInt(f, 10)
}

// waited is how long ago t was, or "-" for zero.
func waited(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return human(now.Sub(t))
}

// keyText is a concurrency key for a table or message: as it is, or
// quoted Go-style when it holds bytes that would garble a table — tabs,
// newlines, other unprintable characters, invalid UTF-8.
func keyText(k string) string {
	if utf8.ValidString(k) && !strings.ContainsFunc(k, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return k
	}
	return strconv.Quote(k)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

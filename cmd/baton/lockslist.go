package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/batonlock"
)

// lockListOut is the lock keys in use as `locks list --json` prints them.
type lockListOut struct {
	// Total is the number of keys in the backend's index after the
	// listing: the keys in use, plus on Redis idle ones past this page that
	// no listing has met yet.
	Total  int        `json:"total"`
	Offset int        `json:"offset"`
	Keys   []*lockOut `json:"keys"`
}

func (a *app) locksListCmd() *cobra.Command {
	var page pageFlags
	var all bool
	cmd := &cobra.Command{
		Use:   "list [--limit N] [--offset N] [--all]",
		Short: "List the lock keys in use, by name",
		Long: `List the standalone lock keys (batonlock) in use — those with holders, waiters, or
a limit set at runtime — in the byte order of their names, with:
  HOLDERS     leases held
  WAITING     callers queued for a slot
  LIMIT       the key's number of slots: "(override)" when set at runtime,
              "halted" for an override of 0, else the last acquirer's Limit
  LAST FENCE  the last fencing token issued for the key
  KEY         the key, last so that a long one does not push the table apart;
              quoted when it holds tabs, newlines or other unprintable bytes
--all lists every key in use instead of one page. 'baton locks show KEY' shows a
key's holders and waiters.

The keys come from an index that the processes keep as they lock (on Redis the
sorted set PREFIX:locks), not from a scan. It is best-effort: a listing removes the
idle keys it meets from it, and a key locked again after that is listed again
within about a minute. Processes that set batonredis.Config.NoLockIndex add no
keys to it.`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			out := lockListOut{Offset: page.offset, Keys: []*lockOut{}}
			var infos []*batonlock.Info
			limit, offset := page.limit, page.offset
			if all {
				limit, offset = maxPage, 0
			}
			for {
				keys, total, err := b.locker.List(ctx, &batonlock.ListOpts{Limit: limit, Offset: offset})
				if err != nil {
					return err
				}
				infos = append(infos, keys...)
				offset += len(keys)
				out.Total = total
				if !all || offset >= total || len(keys) == 0 { // an empty page: keys went idle meanwhile
					break
				}
			}
			for _, info := range infos {
				out.Keys = append(out.Keys, toLockOut(info))
			}
			return a.emit(out, func(w io.Writer) { lockListTable(w, infos, out.Total, out.Offset, all) })
		}),
	}
	// Checked before anything connects: bad usage whatever the state of
	// Redis.
	cmd.Args = func(cmd *cobra.Command, _ []string) error {
		if all && (cmd.Flags().Changed("limit") || cmd.Flags().Changed("offset")) {
			return usageErr("--all lists every key: give it without --limit and --offset")
		}
		return nil
	}
	page.add(cmd, "keys")
	cmd.Flags().BoolVar(&all, "all", false, "list every key in use, not one page")
	return cmd
}

func lockListTable(w io.Writer, infos []*batonlock.Info, total, offset int, all bool) {
	if len(infos) == 0 {
		if offset > 0 && total > 0 {
			fmt.Fprintf(w, "no lock keys in use past the first %d (%d in all)\n", offset, total)
			return
		}
		fmt.Fprintln(w, "no lock keys in use")
		return
	}
	row(w, "HOLDERS", "WAITING", "LIMIT", "LAST FENCE", "KEY")
	for _, k := range infos {
		fence := "-"
		if k.LastFence > 0 {
			fence = strconv.FormatUint(k.LastFence, 10)
		}
		row(w, len(k.Holders), k.WaiterCount, lockLimitText(k), fence, keyText(k.Key))
	}
	if shown := offset + len(infos); !all && (shown < total || offset > 0) {
		fmt.Fprintf(w, "(%d-%d of %d lock keys%s)\n", offset+1, shown, total, more(shown, total))
	} else {
		fmt.Fprintf(w, "(%d lock %s in use)\n", len(infos), plural(len(infos), "key", "keys"))
	}
}

// lockLimitText is a lock key's limit for a table.
func lockLimitText(k *batonlock.Info) string {
	switch {
	case k.Override && k.Limit == 0:
		return "halted"
	case k.Override:
		return fmt.Sprintf("%d (override)", k.Limit)
	}
	return strconv.Itoa(k.Limit)
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func newFunctionsCmd(a *app) *cobra.Command {
	return group("functions", "Housekeeping of the Redis functions Baton loads", a.functionsPruneCmd())
}

func (a *app) functionsPruneCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "prune",
		Short: "Delete the job functions of other Baton versions",
		Long: `Delete, on every master, the Redis function libraries that other Baton versions
loaded (baton_ and a hash of their code) and keep this version's. Functions are
part of Redis's data, so each version that ran leaves its library behind until
it is deleted. A process of another version that still runs loads its library
again at its next job call: pruning is safe at any time, best done once every
process runs this version.`,
		RunE: a.action(0, 0, func(ctx context.Context, b *backend, _ []string) error {
			deleted, err := b.driver.PruneFunctions(ctx)
			if err != nil {
				return err
			}
			if deleted == nil {
				deleted = []string{} // [] in JSON
			}
			return a.emit(map[string][]string{"deleted": deleted}, func(w io.Writer) {
				if len(deleted) == 0 {
					fmt.Fprintln(w, "no other version's functions to delete")
					return
				}
				for _, name := range deleted {
					fmt.Fprintf(w, "deleted %s\n", name)
				}
			})
		}),
	}
}

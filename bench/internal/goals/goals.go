// Package goals collects a benchmark command's goal lines — a figure beside
// the target its issue set, and whether it is met — and prints them
// together at the end of the run.
package goals

import (
	"fmt"
	"io"

	"github.com/batonhq/baton/bench/internal/table"
)

// List is the goal lines of a run, in the order they were added. The zero
// List is empty and ready to use.
type List struct{ lines []string }

// Add adds the line "goal: " + format, formatted as by fmt.Sprintf with
// args, followed by "  -> met" or "  -> NOT met" as ok says.
func (g *List) Add(ok bool, format string, args ...any) {
	g.lines = append(g.lines, fmt.Sprintf("goal: "+format+"  -> %s", append(args, table.Verdict(ok))...))
}

// Print writes the title "Goals" and the lines to w, each block followed by
// a blank line. It writes nothing if no goal was added.
func (g *List) Print(w io.Writer) {
	if len(g.lines) == 0 {
		return
	}
	fmt.Fprintln(w, "Goals")
	fmt.Fprintln(w)
	for _, l := range g.lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w)
}

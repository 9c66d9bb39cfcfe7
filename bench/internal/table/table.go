// Package table prints the benchmark commands' plain-text tables and
// formats the numbers in their cells.
package table

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Table is a plain-text table: the first column left-aligned, the others
// right-aligned, followed by notes.
type Table struct {
	// Title is printed above the table.
	Title string
	// Header names the columns.
	Header []string
	// Rows are the table's rows, added with Add.
	Rows [][]string
	// Notes are printed below the table, added with Note.
	Notes []string
}

// Add appends a row.
func (t *Table) Add(cells ...string) { t.Rows = append(t.Rows, cells) }

// Note appends a note, formatted as by fmt.Sprintf.
func (t *Table) Note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// Print writes the title, the table and its notes to w.
func (t *Table) Print(w io.Writer) {
	widths := make([]int, len(t.Header))
	for _, r := range append([][]string{t.Header}, t.Rows...) {
		for i, c := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	fmt.Fprintln(w, t.Title)
	fmt.Fprintln(w)
	line(t.Header)
	total := len(widths) - 1
	for _, n := range widths {
		total += n + 1
	}
	fmt.Fprintln(w, strings.Repeat("-", total))
	for _, r := range t.Rows {
		line(r)
	}
	if len(t.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range t.Notes {
			fmt.Fprintln(w, n)
		}
	}
	fmt.Fprintln(w)
}

// Number formats.

// Rate prints a rate with no decimals.
func Rate(r float64) string { return fmt.Sprintf("%.0f", r) }

// Float prints v with prec decimals.
func Float(v float64, prec int) string { return fmt.Sprintf("%.*f", prec, v) }

// Dur prints a duration in milliseconds with three significant digits.
func Dur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 1:
		return fmt.Sprintf("%.3fms", ms)
	case ms < 10:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 100:
		return fmt.Sprintf("%.1fms", ms)
	}
	return fmt.Sprintf("%.0fms", ms)
}

// Pct prints a signed percentage with no decimals: "+12%".
func Pct(v float64) string { return fmt.Sprintf("%+.0f%%", v) }

// Range prints the lowest and highest of rates: "lo..hi", "-" if empty.
func Range(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	return Rate(slices.Min(rs)) + ".." + Rate(slices.Max(rs))
}

// Verdict prints whether a goal is met.
func Verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

// PrintBreakdown writes title and then each line indented by two spaces,
// followed by a blank line: the per-cell details gathered under -v. It
// writes nothing if there are no lines.
func PrintBreakdown(w io.Writer, title string, lines []string) {
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, title)
	for _, l := range lines {
		fmt.Fprintln(w, "  "+l)
	}
	fmt.Fprintln(w)
}

package main

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// table is a plain-text table: the first column left-aligned, the others
// right-aligned, followed by notes.
type table struct {
	title  string
	header []string
	rows   [][]string
	notes  []string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func (t *table) print(w io.Writer) {
	widths := make([]int, len(t.header))
	for _, r := range append([][]string{t.header}, t.rows...) {
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
	fmt.Fprintln(w, t.title)
	fmt.Fprintln(w)
	line(t.header)
	total := len(widths) - 1
	for _, n := range widths {
		total += n + 1
	}
	fmt.Fprintln(w, strings.Repeat("-", total))
	for _, r := range t.rows {
		line(r)
	}
	if len(t.notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range t.notes {
			fmt.Fprintln(w, n)
		}
	}
	fmt.Fprintln(w)
}

// Number formats.

func fmtRate(r float64) string { return fmt.Sprintf("%.0f", r) }

func fmtF(v float64, prec int) string { return fmt.Sprintf("%.*f", prec, v) }

// fmtDur prints a duration in milliseconds with three significant digits.
func fmtDur(d time.Duration) string {
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

// verdict prints whether a goal is met.
func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

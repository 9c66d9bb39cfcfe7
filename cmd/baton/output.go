package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// emit prints v as indented JSON with --json, else calls table with a
// tabwriter on stdout: people get aligned columns, scripts get stable
// field names.
func (a *app) emit(v any, table func(w io.Writer)) error {
	if a.json {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// row writes one tab-separated table row.
func row(w io.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}

// human renders a duration for people: "850ms", "42s", "17m", "5h", "3d".
func human(d time.Duration) string {
	d = d.Abs()
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// when renders t relative to now: "5m ago", "in 2h", or "-" for zero.
func when(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if d := t.Sub(now); d > 0 {
		return "in " + human(d)
	}
	return human(now.Sub(t)) + " ago"
}

// stamp renders t in full for `jobs show`: RFC 3339 in UTC and relative.
func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + when(t, now) + ")"
}

// timePtr is t for JSON, omitted when zero.
func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// clip shortens s to n runes on one line, for a table cell.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

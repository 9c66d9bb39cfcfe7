package demo

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// summary prints the totals, the table of keys and the verdict on every
// guarantee.
func (r *run) summary(res *Result) {
	s := r.screen
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s %s\n", s.paint(bold, "Summary"), s.paint(dim, fmt.Sprintf("(%.1fs)", res.Elapsed.Seconds())))
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  processed\t%d jobs completed\n", res.Processed)
	fmt.Fprintf(tw, "  retried\t%d failed attempts, run again after a backoff\n", res.Retried)
	fmt.Fprintf(tw, "  dropped\t%d twins of a queued or running sync\n", res.Dropped)
	fmt.Fprintf(tw, "  parked peak\t%d jobs waiting for a slot at once (sampled)\n", res.ParkedPeak)
	fmt.Fprintf(tw, "  handoff latency\tp50 %s, p99 %s over %d handoffs\n",
		latency(res.Handoffs, 0.50), latency(res.Handoffs, 0.99), len(res.Handoffs))
	fmt.Fprintf(tw, "  \t(a holder returns → the next waiting job of its key starts)\n")
	tw.Flush()

	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-18s\tLIMIT\tMAX SEEN\tSTARTS\tPARKED PEAK\tHANDOFF p50\tp99\t\n", "KEY")
	h := r.track.haltRecord()
	var users keyStats
	userKeys := 0
	for _, k := range r.track.snapshot() {
		if strings.HasPrefix(k.key, "user:") {
			users.limit, users.maxSeen = k.limit, max(users.maxSeen, k.maxSeen)
			users.starts += k.starts
			userKeys++
			continue
		}
		limit := fmt.Sprint(k.limit)
		if k.key == h.key {
			limit = "0→" + limit
		}
		fmt.Fprintf(tw, "%-18s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", k.key, limit, k.maxSeen, k.starts, k.parkedPeak,
			latency(k.handoffs, 0.50), latency(k.handoffs, 0.99))
	}
	if userKeys > 0 {
		fmt.Fprintf(tw, "%-18s\t%d\t%d\t%d\t–\t–\t–\t\n", fmt.Sprintf("user:0…%d (%d keys)", userKeys-1, userKeys), users.limit, users.maxSeen, users.starts)
	}
	tw.Flush()
	if h.key != "" {
		note := fmt.Sprintf("%s was halted (limit 0) from %v to %v. A sync's twins are dropped, not parked, so user keys have no handoffs.",
			h.key, r.d(haltAt), r.d(resumeAt))
		for _, l := range wrap(note, 76) {
			fmt.Fprintf(&b, "  %s\n", s.paint(dim, l))
		}
	}

	fmt.Fprintf(&b, "\n%s\n", s.paint(bold, "Guarantees"))
	failed := 0
	for _, c := range res.Checks {
		verdict := s.paint(green, "PASS")
		if !c.OK {
			verdict = s.paint(red, "FAIL")
			failed++
		}
		fmt.Fprintf(&b, "  %s  %s\n", verdict, c.Name)
		for _, l := range wrap(c.Detail, 70) {
			fmt.Fprintf(&b, "        %s\n", s.paint(dim, l))
		}
	}
	b.WriteString("\n")
	if failed == 0 {
		fmt.Fprintf(&b, "%s\n", s.paint(green+";"+bold, fmt.Sprintf("All %d guarantees held.", len(res.Checks))))
	} else {
		fmt.Fprintf(&b, "%s\n", s.paint(red+";"+bold, fmt.Sprintf("FAILED: %d of %d guarantees did not hold.", failed, len(res.Checks))))
	}
	b.WriteString(s.paint(dim, "The standalone locks have their own demonstration: baton demo locks") + "\n")
	s.printf("%s", b.String())
}

// wrap breaks text into lines of at most width runes, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(lines, line)
}

// latency is the p-th percentile of sorted (nearest rank), or "–".
func latency(sorted []time.Duration, p float64) string {
	if len(sorted) == 0 {
		return "–"
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	d := sorted[max(i, 0)]
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return d.Round(10 * time.Millisecond).String()
}

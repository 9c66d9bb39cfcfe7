package demo

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// screen owns the output. Live, it keeps a block of progress lines at the
// bottom of a terminal and redraws it in place, printing events above it;
// otherwise it prints events and, now and then, one progress line, for logs
// that CI captures.
type screen struct {
	mu    sync.Mutex
	out   io.Writer
	live  bool
	color bool
	start time.Time
	shown int // lines of the live block now on screen
}

// ANSI styles.
const (
	bold   = "1"
	dim    = "2"
	red    = "31"
	green  = "32"
	yellow = "33"
	cyan   = "36"
)

// paint styles s, if colors are on.
func (s *screen) paint(style, text string) string {
	if !s.color || text == "" {
		return text
	}
	return "\x1b[" + style + "m" + text + "\x1b[0m"
}

// since formats the time since the demo started, as events are stamped.
func (s *screen) since() string {
	return fmt.Sprintf("%5.1fs", time.Since(s.start).Seconds())
}

// printf prints text outside the live block.
func (s *screen) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	fmt.Fprintf(s.out, format, args...)
}

// event prints a line stamped with the time since the start.
func (s *screen) event(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	fmt.Fprintf(s.out, "%s  %s\n", s.paint(dim, s.since()), fmt.Sprintf(format, args...))
}

// clear erases the live block; the next draw puts it back. Called with mu
// held.
func (s *screen) clear() {
	if s.shown > 0 {
		fmt.Fprintf(s.out, "\x1b[%dA\r\x1b[J", s.shown)
		s.shown = 0
	}
}

// draw (re)draws the live block with lines. None may wrap, or clear
// would erase too few: block keeps them within 80 columns.
func (s *screen) draw(lines []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clear()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteString("\x1b[K\n")
	}
	io.WriteString(s.out, b.String())
	s.shown = len(lines)
}

// final shows p for the last time: the live block stays on screen, or one
// more progress line.
func (s *screen) final(p progress) {
	if !s.live {
		s.event("%s", s.line(p))
		return
	}
	lines := s.block(p)
	s.draw(lines[:len(lines)-1]) // without the clock: the next event says when
	s.mu.Lock()
	s.shown = 0
	s.mu.Unlock()
}

// hideCursor and showCursor bracket the live block.
func (s *screen) hideCursor() { s.printf("\x1b[?25l") }
func (s *screen) showCursor() { s.printf("\x1b[?25h") }

// progress is what the progress shows at one moment.
type progress struct {
	webhooksDone, webhooksTotal, webhooksRunning, webhooksParked, retried int
	syncDone, syncTotal, syncRunning, syncDropped                         int
	digestsDone, digestsQueued, ticks                                     int
	charge                                                                string
	halt                                                                  string // the halted key's state, or ""
	busiest                                                               string // the key with most parked, or ""
}

// block is the live block for p.
func (s *screen) block(p progress) []string {
	bar := func(done, total int) string {
		const width = 20
		n := 0
		if total > 0 {
			n = min(width, done*width/total)
		}
		return "▕" + s.paint(green, strings.Repeat("█", n)) + s.paint(dim, strings.Repeat("░", width-n)) + "▏"
	}
	parked := fmt.Sprintf("%d parked", p.webhooksParked)
	if p.webhooksParked > 0 {
		parked = s.paint(yellow, parked)
	}
	lines := []string{
		fmt.Sprintf("  %-8s %s %3d/%-3d  %3d running  %s  %d retried", "webhooks", bar(p.webhooksDone, p.webhooksTotal),
			p.webhooksDone, p.webhooksTotal, p.webhooksRunning, parked, p.retried),
		fmt.Sprintf("  %-8s %s %3d/%-3d  %3d running  %d dropped", "sync", bar(p.syncDone, p.syncTotal),
			p.syncDone, p.syncTotal, p.syncRunning, p.syncDropped),
		fmt.Sprintf("  %-8s %s %3d/%-3d  %s", "digests", bar(p.digestsDone, max(p.digestsQueued, 1)),
			p.digestsDone, p.digestsQueued, plural(p.ticks, "fan-out tick")),
		fmt.Sprintf("  %-8s %s", "billing", cut(p.charge, 68)),
	}
	keys := p.busiest
	if p.halt != "" {
		keys = s.paint(yellow, p.halt)
	}
	if keys != "" {
		lines = append(lines, fmt.Sprintf("  %-8s %s", "keys", keys))
	}
	lines = append(lines, "  "+s.paint(dim, fmt.Sprintf("%.1fs", time.Since(s.start).Seconds())))
	return lines
}

// line is p on one line, for logs.
func (s *screen) line(p progress) string {
	parts := []string{
		fmt.Sprintf("webhooks %d/%d, %d running, %d parked, %d retried", p.webhooksDone, p.webhooksTotal, p.webhooksRunning, p.webhooksParked, p.retried),
		fmt.Sprintf("sync %d/%d, %d dropped", p.syncDone, p.syncTotal, p.syncDropped),
		fmt.Sprintf("digests %d/%d (%s)", p.digestsDone, p.digestsQueued, plural(p.ticks, "tick")),
	}
	if p.halt != "" {
		parts = append(parts, p.halt)
	}
	return strings.Join(parts, " | ")
}

// plural is "1 thing" or "n things".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// cut shortens s to n runes.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

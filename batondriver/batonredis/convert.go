package batonredis

import (
	"strconv"
	"time"
)

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

func itoa(n int) string { return strconv.Itoa(n) }

func utoa(n uint64) string { return strconv.FormatUint(n, 10) }

func parseUint(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }

// msUntil turns a score in server milliseconds into the time left at now.
func msUntil(score string, now int64) time.Duration {
	f, err := strconv.ParseFloat(score, 64)
	if err != nil {
		return 0
	}
	return time.Duration(int64(f)-now) * time.Millisecond
}

// flag is a boolean argument of a script: "1" or "0".
func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

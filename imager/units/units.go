// Package units formats byte counts, rates and durations for people, in
// the decimal units disk vendors and em-imager's progress use (1 MB =
// 10^6 bytes).
package units

import (
	"fmt"
	"time"
)

var prefixes = []string{"B", "kB", "MB", "GB", "TB", "PB", "EB"}

// Bytes formats n with three significant digits: 512 B, 1.07 GB, 268 MB.
func Bytes(n int64) string {
	if n < 1000 && n > -1000 {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), 0
	for (v >= 999.5 || v <= -999.5) && i < len(prefixes)-1 {
		v /= 1000
		i++
	}
	switch {
	case v >= 99.95 || v <= -99.95:
		return fmt.Sprintf("%.0f %s", v, prefixes[i])
	case v >= 9.995 || v <= -9.995:
		return fmt.Sprintf("%.1f %s", v, prefixes[i])
	}
	return fmt.Sprintf("%.2f %s", v, prefixes[i])
}

// Rate formats bytes per second: "115 MB/s".
func Rate(bytesPerSecond float64) string {
	return Bytes(int64(bytesPerSecond)) + "/s"
}

// Duration formats a duration to the second: 45s, 3m07s, 1h02m.
func Duration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm", s/3600, s%3600/60)
}

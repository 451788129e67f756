package units

import (
	"testing"
	"time"
)

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 512: "512 B", 999: "999 B", 1000: "1.00 kB", 1536: "1.54 kB", 99_949: "99.9 kB",
		268_435_456: "268 MB", 1_073_741_824: "1.07 GB", 1_920_383_410_176: "1.92 TB", 999_999: "1.00 MB",
	} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := Rate(115_100_000); got != "115 MB/s" {
		t.Errorf("Rate = %q", got)
	}
}

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 1400 * time.Millisecond: "1s", 59 * time.Second: "59s", 187 * time.Second: "3m07s", 3720 * time.Second: "1h02m",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
	}
}

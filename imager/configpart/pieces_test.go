package configpart

import (
	"errors"
	"testing"
)

// TestGPTSectorSize: the header found decides when the disk does not; a
// header for other sectors than the disk's is refused.
func TestGPTSectorSize(t *testing.T) {
	for _, c := range []struct {
		at        []int
		want, got int
		err       error
	}{
		{nil, 0, 0, ErrNotImaged},
		{[]int{4096}, 0, 4096, nil},
		{[]int{512, 4096}, 0, 512, nil},
		{[]int{512, 4096}, 4096, 4096, nil},
		{[]int{512}, 4096, 0, ErrSectorSize},
	} {
		got, err := gptSectorSize(c.at, c.want)
		if got != c.got || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("gptSectorSize(%v, %d) = %d, %v; want %d, %v", c.at, c.want, got, err, c.got, c.err)
		}
	}
}

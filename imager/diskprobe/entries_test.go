package diskprobe

import "testing"

// TestEntriesReadable pins the bounds readGPT puts on a header's partition array before it
// allocates what the header says.
func TestEntriesReadable(t *testing.T) {
	const size, ss = 1 << 30, 512
	ok := gptHeader{entriesLBA: 2, entries: 128, entrySize: 128}
	for _, c := range []struct {
		name string
		edit func(*gptHeader)
		want bool
	}{
		{"standard", func(*gptHeader) {}, true},
		{"entry size 256", func(h *gptHeader) { h.entrySize = 256 }, true},
		{"entry size under 128", func(h *gptHeader) { h.entrySize = 64 }, false},
		{"entry size not a power of two", func(h *gptHeader) { h.entrySize = 384 }, false},
		{"entry size over 4096", func(h *gptHeader) { h.entrySize = 8192 }, false},
		{"no entries", func(h *gptHeader) { h.entries = 0 }, false},
		{"over 1024 entries", func(h *gptHeader) { h.entries = 1025 }, false},
		{"array past the disk", func(h *gptHeader) { h.entriesLBA = size/ss + 1 }, false},
	} {
		h := ok
		c.edit(&h)
		if got := h.entriesReadable(size, ss); got != c.want {
			t.Errorf("%s: entriesReadable = %v, want %v", c.name, got, c.want)
		}
	}
}

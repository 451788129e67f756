// Package lzma is the LZMA2 decoder of github.com/ulikunitz/xz v0.5.17
// (BSD-3-Clause, see LICENSE), reduced to what decoding needs, with one
// change in decoderdict.go: writeMatch copies overlapping matches (a run of
// zeros is a match at distance 1) in doubling chunks instead of `distance`
// bytes per call, which made zero-heavy disk images decode several times
// slower than liblzma. Everything else is upstream's code unchanged.
package lzma

// MinDictCap and MaxDictCap provide the range of supported dictionary
// capacities (upstream's writer.go).
const (
	MinDictCap = 1 << 12
	MaxDictCap = 1<<32 - 1
)

// Package decompress turns a compressed image stream into raw bytes, with
// every integrity check of the format enforced and trailing data refused.
//
//	f := decompress.Detect(first6Bytes)          // xz, zstd, gzip or raw
//	r, err := decompress.NewReader(src, f, 0)    // 0: GOMAXPROCS workers
//	defer r.Close()
//	_, err = io.Copy(dst, r)                     // errors wrap ErrCorrupt, ErrTruncated, ErrTrailingData, ErrUnsupported
//
// xz files written with `xz -T` (Talos: xz -0 -T0) record each block's sizes
// in its header; such blocks are decoded in parallel with the public LZMA2
// reader of github.com/ulikunitz/xz/lzma and delivered in order, with each
// block's check (CRC32/CRC64/SHA-256), the index and the footer verified.
// Blocks without sizes (single-threaded xz), or too big for the memory
// budget, are decoded streaming. Everything a block holds (compressed bytes,
// dictionary, decoded bytes) is charged to one 68 MiB budget, whatever the
// block size. Empty blocks byte-identical to one already decoded are not
// decoded again. zstd uses github.com/klauspost/compress with one decoder
// goroutine per core. RawSize reads the decompressed size from the xz index
// or the zstd frame header. ReportCode maps errors to report codes.
package decompress

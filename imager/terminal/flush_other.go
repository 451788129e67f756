//go:build !linux

package terminal

import "os"

// discardTypeahead: em-imager runs on Linux; elsewhere typed-ahead input
// stays (only tests build it there).
func discardTypeahead(*os.File) {}

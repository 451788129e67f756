package testenv

import "testing"

// SkipIfShort skips tb under `go test -short` (make test-fast): the fast
// tier runs only tests that start no process of the simulated world. Every
// starter of this package and of package world calls it, so a test that
// needs one is skipped there, without remembering to; `make test` runs it.
// what names the process, for the skip message.
func SkipIfShort(tb testing.TB, what string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("-short (make test-fast): this test starts %s; make test runs it", what)
	}
}

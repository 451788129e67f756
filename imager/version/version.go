// Package version carries the build's version, stamped by the Makefile with -ldflags -X.
package version

// Version is set at build time; "dev" for go run / go test.
var Version = "dev"

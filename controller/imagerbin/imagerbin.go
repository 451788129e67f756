// Package imagerbin embeds the static em-imager the controller uploads to
// each server's rescue system. `make build` copies bin/em-imager here first;
// a build without it (go test, go vet) embeds nothing and the controller
// refuses to image, saying so.
package imagerbin

import "embed"

//go:embed *
var files embed.FS

// Binary returns the embedded em-imager, or nil when the build has none.
func Binary() []byte {
	b, err := files.ReadFile("em-imager")
	if err != nil {
		return nil
	}
	return b
}

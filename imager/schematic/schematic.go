// Package schematic computes Talos Image Factory schematics and their IDs
// offline, so that the ID of the image to publish is known before asking the
// factory for it, and the one that makes nodes read their config from the
// disk (talos.config=metal-iso) is the one the docs name.
//
// Image Factory's ID is the sha256 of its YAML encoding of the schematic
// (go.yaml.in/yaml/v4, fields in the factory's order, empty ones left out).
// Only the fields this project uses are modelled; their order and names
// follow the factory's (extraKernelArgs before systemExtensions), and the
// tests check the IDs the factory's own tests and docs publish.
package schematic

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v4"
)

// MetalISOArg makes Talos read its machine config from a partition labelled
// metal-iso, which em-imager write-config writes from rescue.
const MetalISOArg = "talos.config=metal-iso"

// Schematic is the part of an Image Factory schematic this project writes.
type Schematic struct {
	Customization Customization `yaml:"customization"`
}

// Customization is the schematic's customization: kernel arguments, then
// system extensions, as the factory orders them.
type Customization struct {
	ExtraKernelArgs  []string         `yaml:"extraKernelArgs,omitempty"`
	SystemExtensions SystemExtensions `yaml:"systemExtensions,omitempty"`
}

// SystemExtensions lists official extensions by name (siderolabs/...).
type SystemExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions,omitempty"`
}

// New is the schematic with the kernel arguments and official extensions
// given, in that order: the factory keeps the order, and so does the ID.
func New(kernelArgs, extensions []string) (Schematic, error) {
	for _, a := range kernelArgs {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			return Schematic{}, fmt.Errorf("kernel argument %q: one argument, no spaces", a)
		}
	}
	for _, e := range extensions {
		if !strings.Contains(e, "/") || strings.ContainsAny(e, " \t\n") {
			return Schematic{}, fmt.Errorf("extension %q: want an official extension's full name, e.g. siderolabs/amd-ucode", e)
		}
	}
	return Schematic{Customization: Customization{
		ExtraKernelArgs:  kernelArgs,
		SystemExtensions: SystemExtensions{OfficialExtensions: extensions},
	}}, nil
}

// YAML is the schematic as the factory encodes it (what to POST to
// /schematics).
func (s Schematic) YAML() ([]byte, error) { return yaml.Marshal(s) }

// ID is the factory's ID of the schematic: the sha256 of its YAML.
func (s Schematic) ID() (string, error) {
	b, err := s.YAML()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

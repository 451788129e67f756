package schematic

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// Usage is `em-imager schematic -h`.
const Usage = `Usage: em-imager schematic [--extension NAME]... [--kernel-arg ARG]... [--yaml] [--maintenance-api]

Prints the Image Factory schematic ID of a Talos image for this project,
computed offline as the factory computes it: the kernel argument
talos.config=metal-iso (nodes read their machine config from the disk, never
over the maintenance API), then the --kernel-arg and --extension values in the
order given. --yaml prints the schematic to POST to the factory instead
(curl -X POST --data-binary @schematic.yaml https://factory.talos.dev/schematics
answers with the same ID).

Flags:
`

// Main runs `em-imager schematic args...` and returns the exit status.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("schematic", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var exts, kargs []string
	fs.Func("extension", "an official system extension `NAME` (siderolabs/...); repeat for more", func(s string) error { exts = append(exts, s); return nil })
	fs.Func("kernel-arg", "an extra kernel `ARG`ument; repeat for more", func(s string) error { kargs = append(kargs, s); return nil })
	asYAML := fs.Bool("yaml", false, "print the schematic (YAML) instead of its ID")
	maintenance := fs.Bool("maintenance-api", false, "leave out talos.config=metal-iso: for NodeClasses with configDelivery: MaintenanceAPI only (the config then crosses the network in the clear)")
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, Usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(stderr, "em-imager schematic: %v\nRun \"em-imager schematic -h\" for the flags.\n", err)
		return 2
	}
	if !*maintenance {
		kargs = append([]string{MetalISOArg}, kargs...)
	}
	s, err := New(kargs, exts)
	if err != nil {
		fmt.Fprintf(stderr, "em-imager schematic: %v\n", err)
		return 2
	}
	out, err := s.YAML()
	if err == nil && !*asYAML {
		var id string
		id, err = s.ID()
		out = []byte(id + "\n")
	}
	if err != nil {
		fmt.Fprintf(stderr, "em-imager schematic: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(out)
	return 0
}

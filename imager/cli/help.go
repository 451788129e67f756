package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Usage is printed for `em-imager help` and with no command.
const Usage = `em-imager writes a (compressed) raw disk image from a URL onto a disk, verified.

  em-imager write   --manifest URL [--disk PATH|auto] [--dry-run] [--yes] [flags]
  em-imager write   --image URL --sha256 HEX [--image-size BYTES] [--disk PATH|auto] [flags]
  em-imager inspect [--manifest URL | --image-size BYTES] [--disk PATH|auto]
                    disks and NICs, and the disk write would take with the same flags; writes nothing
  em-imager write-config --disk PATH < config.yaml   machine config -> metal-iso partition
  em-imager erase   (--disk PATH... | --all-disks) [--method auto|discard|overwrite] [--full]
                    erase what a former node left (discard, verified; else zeroes)
  em-imager kexec   --disk PATH [--dry-run]   boot the written image without a firmware reboot
  em-imager publish --input FILE|URL --schematic ID --talos-version vX.Y.Z   image + manifest -> S3
  em-imager presign --schematic ID --talos-version vX.Y.Z   expiring URLs of a private bucket's image,
                    manifest and em-imager, for a rescue shell
  em-imager schematic [--extension NAME]...   the Image Factory schematic ID to publish (talos.config=metal-iso)
  em-imager version

write, inspect, write-config, erase and kexec print exactly one JSON report on stdout; progress goes to stderr.
Run "em-imager COMMAND -h" (or "em-imager help COMMAND") for a command's flags.
Exit status: 0 ok, 2 bad arguments, 3 download, 4 image data (digest, corrupt,
truncated, format, manifest), 5 disk, 6 write/verify/erase, 7 not confirmed,
8 kexec refused (nothing loaded: reboot instead), 130 interrupted, 1 other.
`

// Commands are em-imager's subcommands; publish, presign and schematic are
// dispatched by imager/cmd/em-imager, the others by Main.
var Commands = []string{"write", "inspect", "write-config", "erase", "kexec", "publish", "presign", "schematic", "version"}

const writeHelp = `usage: em-imager write --manifest URL [--disk PATH|auto] [flags]
       em-imager write --image URL --sha256 HEX [--image-size BYTES] [--disk PATH|auto] [flags]

Streams the image onto the disk, verifies its SHA-256 and only then writes its
first MiB, so the disk boots only a verified image. --manifest reads the image's
URL, format, raw size and raw SHA-256 from the manifest em-imager publish wrote
(https, or plain http with --manifest-sha256). --dry-run makes every check up to
the first byte (disk, image format, sector size, size) and writes nothing. On a
terminal, write names the disk and what it holds and asks before writing (--yes
skips the question); without a terminal it never asks.

Flags:
`

const inspectHelp = `usage: em-imager inspect [--manifest URL | --image-size BYTES] [--disk PATH|auto] [flags]

Describes the disks and NICs and says which disk "em-imager write" with the same
--disk, --image-size (or --manifest) and --allow-virtual would take, and why the
others not. Writes nothing. stdout: one JSON report; on a terminal, stderr shows
it as tables, with what each disk holds now.

Flags:
`

const versionHelp = `usage: em-imager version

Prints em-imager's version, the Go version and platform it was built with, and
the report schema version.
`

// help writes the help of command to w and reports whether it knows command.
func help(w io.Writer, command string) bool {
	switch command {
	case "write":
		fs := newWriteFlagSet(&writeFlags{})
		fmt.Fprint(w, writeHelp)
		printDefaults(w, fs)
	case "inspect":
		fs := newInspectFlagSet(&inspectFlags{})
		fmt.Fprint(w, inspectHelp)
		printDefaults(w, fs)
	case "write-config":
		fs, _, _, _ := newWriteConfigFlagSet()
		fmt.Fprint(w, WriteConfigUsage+"\nFlags:\n")
		printDefaults(w, fs)
	case "erase":
		fs := newEraseFlagSet(&eraseFlags{})
		fmt.Fprint(w, EraseUsage)
		printDefaults(w, fs)
	case "kexec":
		fs := newKexecFlagSet(&kexecFlags{})
		fmt.Fprint(w, KexecUsage)
		printDefaults(w, fs)
	case "version":
		fmt.Fprint(w, versionHelp)
	default:
		return false
	}
	return true
}

func printDefaults(w io.Writer, fs *flag.FlagSet) {
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// wantsHelp: -h, -help or --help anywhere before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

func unknownCommand(w io.Writer, name string) {
	fmt.Fprintf(w, "em-imager: unknown command %q; the commands are %s.\nRun \"em-imager help\" for what they do.\n", name, strings.Join(Commands, ", "))
}

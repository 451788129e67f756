// Package cli implements em-imager's subcommands (write, inspect,
// write-config, version): flag parsing and help, the download -> decompress
// -> disk pipeline with its dry run and, at a terminal, its question,
// progress on stderr and the one JSON report on stdout. imager/cmd/em-imager
// calls Main.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/decompress"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/diskwrite"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hwinfo"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/source"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/terminal"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/version"
)

// Main runs one subcommand (args without the program name) with the
// process's standard streams and returns the exit status.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, Usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		return runHelp(rest, stdout, stderr)
	case "--version", "-version":
		cmd = "version"
	}
	if !runsHere(cmd) {
		unknownCommand(stderr, cmd)
		return 2
	}
	if wantsHelp(rest) {
		help(stdout, cmd)
		return 0
	}
	std := streams{stdin: stdin, stderr: stderr, stderrTTY: terminal.Is(stderr)}
	std.interactive = std.stderrTTY && terminal.Is(stdin)
	return dispatch(ctx, cmd, rest, std, stdout)
}

// runHelp prints the usage, or one command's help.
func runHelp(rest []string, stdout, stderr io.Writer) int {
	if len(rest) == 0 {
		fmt.Fprint(stdout, Usage)
		return 0
	}
	if !help(stdout, rest[0]) {
		unknownCommand(stderr, rest[0])
		return 2
	}
	return 0
}

// runsHere reports whether cmd is a command this binary runs: publish, presign and schematic
// are listed (for their help) but belong to the operator's side.
func runsHere(cmd string) bool {
	return slices.Contains(Commands, cmd) && cmd != "publish" && cmd != "presign" && cmd != "schematic"
}

// dispatch runs a command and returns the exit status; each prints its report on stdout.
func dispatch(ctx context.Context, cmd string, rest []string, std streams, stdout io.Writer) int {
	switch cmd {
	case "write":
		return runWriteMain(ctx, rest, std, stdout)
	case "inspect":
		return emit(stdout, runInspect(ctx, rest, std))
	case "write-config":
		return emit(stdout, runWriteConfig(ctx, rest, std.stdin))
	case "erase":
		return emit(stdout, runErase(ctx, rest, std))
	case "kexec":
		return runKexec(ctx, rest, stdout, std.stderr)
	}
	fmt.Fprintf(stdout, "em-imager %s (%s %s/%s, report schema v%d)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH, report.Version)
	return 0
}

// runWriteMain runs write. Bare `write`: a person gets the usage; a program still gets its one
// JSON report.
func runWriteMain(ctx context.Context, rest []string, std streams, stdout io.Writer) int {
	r, err := runWrite(ctx, rest, std)
	if errors.Is(err, errNoImage) {
		fmt.Fprint(std.stderr, writeHelp[:strings.Index(writeHelp, "\n\n")+1])
		fmt.Fprintln(std.stderr, `Run "em-imager write -h" for the flags.`)
		if terminal.Is(stdout) {
			return report.ExitCode(report.CodeInvalidArgument)
		}
	}
	return emit(stdout, r)
}

func emit(stdout io.Writer, r *report.Report) int {
	r.Version = report.Version
	r.Imager = version.Version
	if r.NICs == nil {
		r.NICs = []report.NIC{}
	}
	code := ""
	if r.Error != nil {
		code = r.Error.Code
		r.OK = false
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	fmt.Fprintf(stdout, "%s\n", b)
	return report.ExitCode(code)
}

func fail(r *report.Report, code, format string, args ...any) *report.Report {
	r.OK = false
	r.Error = &report.Error{Code: code, Message: fmt.Sprintf(format, args...)}
	return r
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	// Errors go into the report, not onto stderr (which carries progress).
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

func nics(root hostroot.Root, warnings []string) ([]report.NIC, []string) {
	n, err := hwinfo.NICs(root)
	if err != nil {
		return []report.NIC{}, append(warnings, "listing network interfaces: "+err.Error())
	}
	return n, warnings
}

func diskCode(err error) string {
	switch {
	case errors.Is(err, blockdev.ErrBusy), errors.Is(err, diskwrite.ErrBusy):
		return report.CodeDiskBusy
	case errors.Is(err, blockdev.ErrTooSmall), errors.Is(err, diskwrite.ErrTooSmall):
		return report.CodeDiskTooSmall
	case errors.Is(err, blockdev.ErrUnsuitable), errors.Is(err, diskwrite.ErrSectorSize):
		return report.CodeDiskUnsuitable
	case errors.Is(err, blockdev.ErrNotFound):
		return report.CodeDiskNotFound
	}
	return ""
}

// errorCode maps any error of the write pipeline to its report code.
func errorCode(ctx context.Context, err error) string {
	if ctx.Err() != nil {
		return report.CodeInterrupted
	}
	if c := diskCode(err); c != "" {
		return c
	}
	switch {
	case errors.Is(err, source.ErrRejected):
		return report.CodeSourceRejected
	case errors.Is(err, source.ErrChanged):
		return report.CodeSourceChanged
	case errors.Is(err, source.ErrStalled), errors.Is(err, source.ErrTimeout):
		return report.CodeStalled
	case errors.Is(err, source.ErrUnreachable):
		return report.CodeSourceUnreachable
	case errors.Is(err, diskwrite.ErrDigestMismatch):
		return report.CodeDigestMismatch
	case decompress.ReportCode(err) != "":
		return decompress.ReportCode(err)
	case errors.Is(err, diskwrite.ErrReadback):
		return report.CodeVerifyFailed
	case errors.Is(err, diskwrite.ErrWrite):
		return report.CodeWriteFailed
	}
	return report.CodeInternal
}

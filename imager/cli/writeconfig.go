package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/configpart"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/terminal"
)

// WriteConfigUsage is printed for `em-imager write-config -h`.
const WriteConfigUsage = `usage: em-imager write-config --disk PATH [--sysroot DIR] < config.yaml

Puts the Talos machine config read from stdin into a GPT partition named
metal-iso (FAT32, config.yaml) after the last partition of the image that
"em-imager write" verified on PATH. Talos images booted with the kernel
argument talos.config=metal-iso read it at first boot. The config is taken
from stdin only, never from arguments or files; the report carries its
sha256, never its content. Running it again replaces the content.
`

func newWriteConfigFlagSet() (fs *flag.FlagSet, disk, sysroot *string, allowVirtual *bool) {
	fs = flag.NewFlagSet("em-imager write-config", flag.ContinueOnError)
	disk = fs.String("disk", "", "the disk `PATH` that em-imager write imaged: a block device or a regular file")
	sysroot = fs.String("sysroot", "", "read /sys, /dev and /proc under DIR (env "+hostroot.EnvVar+")")
	allowVirtual = fs.Bool("allow-virtual", false, "accept a loop, nbd, dm, md or RAM device named by --disk")
	return fs, disk, sysroot, allowVirtual
}

// runWriteConfig is `em-imager write-config`: the config (bootstrap token,
// cluster CAs) comes on stdin, never in argv or a file.
func runWriteConfig(ctx context.Context, args []string, stdin io.Reader) *report.Report {
	started := time.Now()
	r := &report.Report{Command: "write-config", Timings: &report.Timings{StartedAt: started.UTC()}}
	defer func() { r.Timings.TotalSeconds = time.Since(started).Seconds() }()
	fs, disk, sysroot, allowVirtual := newWriteConfigFlagSet()
	if err := parseFlags(fs, args); err != nil {
		return fail(r, report.CodeInvalidArgument, "%v", err)
	}
	if *disk == "" || *disk == "auto" {
		return fail(r, report.CodeInvalidArgument, "--disk is required: the disk `em-imager write` reported")
	}
	if terminal.Is(stdin) {
		return fail(r, report.CodeInvalidArgument, "the config is read from stdin: pipe it in (em-imager write-config --disk %s < config.yaml)", *disk)
	}
	config, err := io.ReadAll(io.LimitReader(stdin, configpart.MaxConfigSize+1))
	if err != nil {
		return fail(r, report.CodeInvalidArgument, "reading the config from stdin: %v", err)
	}
	if err := configpart.CheckConfig(config); err != nil {
		return fail(r, report.CodeInvalidArgument, "%v", err)
	}
	root := hostroot.Resolve(*sysroot)
	// The same disk rule as write: a link is resolved and every check runs on the device it names.
	choice, err := blockdev.Choose(root, blockdev.Request{Disk: *disk, AllowVirtual: *allowVirtual})
	d := choice.Disk
	r.Disk = d
	if err != nil {
		return fail(r, diskCode(err), "%v", err)
	}
	sectorSize := d.LogicalSectorSize
	if d.Transport == "file" {
		// A plain image file has no sector size of its own: the GPT says.
		sectorSize = 0
	}
	res, err := configpart.Write(ctx, choice.OpenPath, config, configpart.Options{
		SectorSize: sectorSize,
		Log:        lineLogger(func(line string) { r.Warnings = append(r.Warnings, line) }),
	})
	if res.SHA256 != "" {
		r.Config = &report.Config{
			SHA256: res.SHA256, Bytes: res.Bytes, Partition: configpart.PartitionName, PartitionNumber: res.PartitionNumber,
			StartBytes: res.StartBytes, SizeBytes: res.SizeBytes, Filesystem: configpart.Filesystem, File: configpart.FileName,
			Replaced: res.Replaced, Verified: res.Verified,
		}
	}
	if err != nil {
		return fail(r, writeConfigCode(ctx, err), "%v", err)
	}
	r.OK = true
	return r
}

func writeConfigCode(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return report.CodeInterrupted
	case errors.Is(err, configpart.ErrConfig):
		return report.CodeInvalidArgument
	case errors.Is(err, configpart.ErrNotImaged), errors.Is(err, configpart.ErrChanged):
		return report.CodeDiskNotImaged
	case errors.Is(err, configpart.ErrNoSpace):
		return report.CodeDiskTooSmall
	case errors.Is(err, configpart.ErrBusy):
		return report.CodeDiskBusy
	case errors.Is(err, configpart.ErrSectorSize):
		return report.CodeDiskUnsuitable
	case errors.Is(err, configpart.ErrWrite):
		return report.CodeWriteFailed
	}
	return report.CodeInternal
}

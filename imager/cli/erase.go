package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/erase"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/terminal"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/units"
)

// EraseUsage is printed for `em-imager erase -h`.
const EraseUsage = `usage: em-imager erase (--disk PATH [--disk PATH]... | --all-disks) [--method auto|discard|overwrite] [--full] [flags]

Erases what a former node left on the disks (machine config, kubelet key,
volumes) before the server is used again. --method auto (the default)
discards the whole device (BLKSECDISCARD, else BLKDISCARD: seconds on an
NVMe/SSD) and reads back the old table areas and sampled blocks across the
device; when the device refuses discard or reads back data, it overwrites
with zeroes instead: every old partition up to 1 GiB whole (STATE, META,
metal-iso, EFI, BOOT) and the first and last MiB of larger ones (EPHEMERAL,
big user volumes), or with --full the whole device (hours on an HDD).
--all-disks takes every disk "write --wipe-other-disks" would wipe, the install
disk too. A disk that is mounted, holds the running system or is held by
RAID/LVM is refused before anything is erased. Disks are erased in parallel.
stdout: one JSON report, with what was done to each disk under "erased".

Flags:
`

type eraseFlags struct {
	disks                        []string
	all, full, allowVirtual, yes bool
	method, sysroot              string
}

func newEraseFlagSet(e *eraseFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("em-imager erase", flag.ContinueOnError)
	fs.Func("disk", "a disk to erase: a block device or a link to one, or a regular file (repeat for several)", func(s string) error {
		e.disks = append(e.disks, s)
		return nil
	})
	fs.BoolVar(&e.all, "all-disks", false, "erase every disk of the host that is not virtual, removable, USB or read-only")
	fs.StringVar(&e.method, "method", erase.MethodAuto, "auto (discard, verified; else overwrite), discard (fail when the device refuses it or reads back data) or overwrite")
	fs.BoolVar(&e.full, "full", false, "when overwriting, write the whole device, not only the old partitions (hours on an HDD)")
	fs.BoolVar(&e.allowVirtual, "allow-virtual", false, "let --disk name a loop, nbd, dm, md or RAM device")
	fs.BoolVar(&e.yes, "yes", false, "do not ask before erasing (on a terminal, erase asks, naming the disks)")
	fs.BoolVar(&e.yes, "y", false, "short for --yes")
	fs.StringVar(&e.sysroot, "sysroot", "", "read /sys, /dev and /proc under DIR (tests, simulated hosts; env "+hostroot.EnvVar+")")
	return fs
}

// eraseTarget is one disk to erase and where to open it.
type eraseTarget struct {
	disk report.Disk
	open string
}

func runErase(ctx context.Context, args []string, std streams) *report.Report {
	started := time.Now()
	r := &report.Report{Command: "erase", Timings: &report.Timings{StartedAt: started.UTC()}}
	defer func() { r.Timings.TotalSeconds = time.Since(started).Seconds() }()
	var e eraseFlags
	if err := parseFlags(newEraseFlagSet(&e), args); err != nil {
		return fail(r, report.CodeInvalidArgument, "%v", err)
	}
	if msg := e.check(); msg != "" {
		return fail(r, report.CodeInvalidArgument, "%s", msg)
	}
	root := hostroot.Resolve(e.sysroot)
	hostDisks(root, r)
	// Every disk is checked before any is erased: one refused disk erases
	// none.
	targets, failed := eraseTargets(root, e, r)
	if failed != nil {
		return failed
	}
	if std.interactive && !e.yes {
		if failed := confirmErase(ctx, std, targets, r); failed != nil {
			return failed
		}
	}
	errs := eraseAll(ctx, std, e, targets, r)
	var msgs []string
	code := ""
	for i, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
			if code == "" {
				code = r.Erased[i].Error.Code
			}
		}
	}
	if code != "" {
		return fail(r, code, "%d of %d disk(s) not erased: %s", len(msgs), len(targets), strings.Join(msgs, "; "))
	}
	r.OK = true
	return r
}

// check says what is wrong with the flags, "" when nothing.
func (e eraseFlags) check() string {
	switch {
	case len(e.disks) == 0 && !e.all:
		return "name the disks to erase with --disk PATH, or pass --all-disks"
	case len(e.disks) > 0 && e.all:
		return "--disk and --all-disks exclude each other"
	case e.method != erase.MethodAuto && e.method != erase.MethodDiscard && e.method != erase.MethodOverwrite:
		return fmt.Sprintf("--method must be auto, discard or overwrite, got %q", e.method)
	}
	return ""
}

// eraseTargets lists the disks the flags name, or the failed report when
// one is refused (nothing is erased then).
func eraseTargets(root hostroot.Root, e eraseFlags, r *report.Report) ([]eraseTarget, *report.Report) {
	var targets []eraseTarget
	if e.all {
		all, skipped, err := blockdev.All(root)
		for _, s := range skipped {
			r.Warnings = append(r.Warnings, s.Path+": "+s.Reason)
		}
		if err != nil {
			return nil, fail(r, diskCode(err), "%v; nothing was erased", err)
		}
		if len(all) == 0 {
			return nil, fail(r, report.CodeDiskNotFound, "--all-disks: the host has no disk to erase; nothing was erased")
		}
		for _, d := range all {
			targets = append(targets, eraseTarget{disk: d.Disk, open: root.Dev(d.Path)})
		}
	}
	for _, name := range e.disks {
		c, err := blockdev.Choose(root, blockdev.Request{Disk: name, AllowVirtual: e.allowVirtual})
		if err != nil {
			if c.Disk != nil {
				r.Erased = append(r.Erased, report.Erase{Path: c.Disk.Path, Name: c.Disk.Name, SizeBytes: c.Disk.SizeBytes, Rotational: c.Disk.Rotational})
			}
			return nil, fail(r, diskCode(err), "%v; nothing was erased", err)
		}
		if slices.ContainsFunc(targets, func(t eraseTarget) bool { return t.disk.Path == c.Disk.Path }) {
			continue // named twice (a path and a link to it): erased once
		}
		targets = append(targets, eraseTarget{disk: *c.Disk, open: c.OpenPath})
	}
	return targets, nil
}

// confirmErase asks at a terminal; the failed report unless answered yes.
func confirmErase(ctx context.Context, std streams, targets []eraseTarget, r *report.Report) *report.Report {
	var names []string
	for _, t := range targets {
		names = append(names, fmt.Sprintf("%s (%s, holds %s)", t.disk.Path, units.Bytes(t.disk.SizeBytes), diskHolds(t.open, t.disk.LogicalSectorSize)))
	}
	yes, err := terminal.Confirm(ctx, std.stdin, std.stderr, "Erase everything on "+strings.Join(names, ", ")+"? [y/N] ")
	switch {
	case err != nil:
		return fail(r, report.CodeInterrupted, "interrupted at the question; nothing was erased")
	case !yes:
		return fail(r, report.CodeNotConfirmed, "not confirmed (answer y to erase, or pass --yes); nothing was erased")
	}
	return nil
}

// eraseAll erases the targets at once, each into its entry of r.Erased, and
// returns each one's error. Disks are independent: erasing them at once
// makes a host's erase as long as its slowest disk, not the sum.
func eraseAll(ctx context.Context, std streams, e eraseFlags, targets []eraseTarget, r *report.Report) []error {
	r.Erased = make([]report.Erase, len(targets))
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	// One logger for all the goroutines: its handler serialises the appends.
	log := lineLogger(func(line string) { r.Warnings = append(r.Warnings, line) })
	for i, t := range targets {
		r.Erased[i] = report.Erase{Path: t.disk.Path, Name: t.disk.Name, SizeBytes: t.disk.SizeBytes, Rotational: t.disk.Rotational}
		wg.Add(1)
		go func() {
			defer wg.Done()
			fmt.Fprintf(std.stderr, "em-imager: erasing %s (%s, method %s)…\n", t.disk.Path, units.Bytes(t.disk.SizeBytes), e.method)
			res, err := erase.Disk(ctx, t.open, t.disk.SizeBytes, erase.Options{
				Method: e.method, Full: e.full, SectorSize: t.disk.LogicalSectorSize,
				Log: log,
			})
			x := &r.Erased[i]
			x.Method, x.Fallback, x.Bytes, x.Seconds = res.Method, res.Fallback, res.Bytes, res.Seconds
			x.Verified, x.VerifiedBytes, x.Complete = res.Verified, res.VerifiedBytes, res.Complete
			x.OldPartitions, x.Left = res.OldPartitions, res.Left
			if err != nil {
				x.Error = &report.Error{Code: eraseCode(ctx, err), Message: err.Error()}
				errs[i] = err
			}
			fmt.Fprintf(std.stderr, "em-imager: %s: %s, %s in %.1f s, verified %v\n", t.disk.Path, res.Method, units.Bytes(res.Bytes), res.Seconds, res.Verified)
		}()
	}
	wg.Wait()
	return errs
}

func eraseCode(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return report.CodeInterrupted
	case errors.Is(err, erase.ErrBusy):
		return report.CodeDiskBusy
	case errors.Is(err, erase.ErrUnsupported):
		return report.CodeDiskUnsuitable
	case errors.Is(err, erase.ErrUnverified):
		return report.CodeEraseUnverified
	}
	return report.CodeEraseFailed
}

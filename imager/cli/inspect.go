package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/blockdev"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/hostroot"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/units"
)

type inspectFlags struct {
	imageFlags
	disk, sysroot string
	allowVirtual  bool
}

func newInspectFlagSet(f *inspectFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("em-imager inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.disk, "disk", "auto", "disk to describe, or auto for the one write --disk auto would pick")
	fs.StringVar(&f.manifest, "manifest", "", "as write --manifest: its raw size chooses the disk, as --image-size does")
	fs.StringVar(&f.manifestSHA, "manifest-sha256", "", "as write --manifest-sha256")
	fs.Int64Var(&f.imageSize, "image-size", 0, "raw image size, as given to write: the same disk is chosen")
	fs.BoolVar(&f.allowVirtual, "allow-virtual", false, "as write --allow-virtual")
	fs.StringVar(&f.sysroot, "sysroot", "", "read /sys, /dev and /proc under DIR (env "+hostroot.EnvVar+")")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 15*time.Second, "TCP connect + TLS handshake timeout for --manifest")
	return fs
}

func runInspect(ctx context.Context, args []string, std streams) *report.Report {
	r := &report.Report{Command: "inspect"}
	var f inspectFlags
	if err := parseFlags(newInspectFlagSet(&f), args); err != nil {
		return fail(r, report.CodeInvalidArgument, "%v", err)
	}
	spec, ferr := resolveImage(ctx, f.imageFlags, false)
	if ferr != nil {
		r.Error = ferr
		return r
	}
	if spec.fetched != nil {
		spec.describe(r, 0)
		r.Image.RawBytes = spec.size
	}
	root := hostroot.Resolve(f.sysroot)
	r.NICs, r.Warnings = nics(root, r.Warnings)
	r.Kexec = kexecVerdict(root)
	c, err := blockdev.Choose(root, blockdev.Request{Disk: f.disk, ImageSize: spec.size, AllowVirtual: f.allowVirtual})
	r.Disk, r.RejectedDisks = c.Disk, c.Rejected
	hostDisks(root, r)
	if err != nil && f.disk != "auto" {
		fail(r, diskCode(err), "%v", err)
	} else {
		if err != nil {
			// inspect reports what it found; an empty choice is not a failure.
			r.Warnings = append(r.Warnings, err.Error())
		}
		r.OK = true
	}
	if std.stderrTTY {
		tables(std.stderr, root, r, f, spec)
	}
	return r
}

// tables shows the report to a person: the disks (what each holds now,
// which one write would take and why not the others), then the NICs.
func tables(w io.Writer, root hostroot.Root, r *report.Report, f inspectFlags, spec imageSpec) {
	all, err := blockdev.List(root)
	if err != nil {
		fmt.Fprintf(w, "em-imager: listing disks: %v\n", err)
	}
	verdict, chosen := diskVerdicts(r)
	fmt.Fprint(w, headline(r, f.disk, spec, chosen))
	writeDiskTable(w, root, all, r, chosen, verdict)
	fmt.Fprintln(w)
	rows := [][]string{{"NIC", "MAC", "PERMANENT MAC", "DRIVER", "PCI", "LINK", "SPEED", "DEFAULT ROUTE"}}
	for _, n := range r.NICs {
		rows = append(rows, nicRow(n))
	}
	for _, l := range table(rows) {
		fmt.Fprintln(w, l)
	}
	if k := r.Kexec; k != nil && k.Possible {
		fmt.Fprintln(w, "\nkexec: possible: "+k.Reason)
	} else if k != nil {
		fmt.Fprintf(w, "\nkexec: not possible (%s): %s\n", k.Code, k.Reason)
	}
	for _, warn := range r.Warnings {
		fmt.Fprintln(w, "warning: "+warn)
	}
}

// diskVerdicts is what the report says of each disk (chosen, or why not taken), by path, and
// the chosen disk's path ("" for none).
func diskVerdicts(r *report.Report) (map[string]string, string) {
	verdict := map[string]string{}
	for _, rd := range r.RejectedDisks {
		verdict[rd.Path] = "not taken: " + rd.Reason
	}
	if r.Disk == nil {
		return verdict, ""
	}
	verdict[r.Disk.Path] = "chosen: " + r.Disk.Reason
	return verdict, r.Disk.Path
}

// headline says, first, what the write these flags describe would do.
func headline(r *report.Report, disk string, spec imageSpec, chosen string) string {
	what := "write --disk " + disk
	switch {
	case spec.fetched != nil:
		what += " --manifest " + spec.fetched.Location
	case spec.size > 0:
		what += fmt.Sprintf(" --image-size %d", spec.size)
	}
	switch {
	case r.Error != nil:
		return fmt.Sprintf("%s refuses: %s\n\n", what, r.Error.Message)
	case chosen != "":
		return fmt.Sprintf("%s would write %s\n\n", what, chosen)
	}
	return fmt.Sprintf("%s finds no disk it may write\n\n", what)
}

// writeDiskTable prints a row per disk with a medium (the chosen one marked), each followed by
// what it holds and the verdict on it, then the disks with no medium on one line.
func writeDiskTable(w io.Writer, root hostroot.Root, all []blockdev.Info, r *report.Report, chosen string, verdict map[string]string) {
	rows := [][]string{{"", "DISK", "SIZE", "TYPE", "SECTOR", "MODEL", "SERIAL"}}
	var notes [][]string // per row: holds, verdict
	var empty []string
	for _, in := range all {
		if in.SizeBytes == 0 && in.Path != chosen {
			empty = append(empty, in.Name)
			continue
		}
		rows = append(rows, diskRow(in, chosen))
		notes = append(notes, []string{"holds: " + diskHolds(root.Dev(in.Path), in.LogicalSectorSize), dash(verdict[in.Path])})
	}
	if r.Disk != nil && r.Disk.Transport == "file" {
		d := r.Disk
		rows = append(rows, []string{"*", d.Path, units.Bytes(d.SizeBytes), "file", fmt.Sprint(d.LogicalSectorSize), "-", "-"})
		notes = append(notes, []string{"holds: " + diskHolds(d.Path, 0), "chosen: " + d.Reason})
	}
	lines := table(rows)
	fmt.Fprintln(w, lines[0])
	for i, l := range lines[1:] {
		fmt.Fprintln(w, l)
		for _, n := range notes[i] {
			fmt.Fprintln(w, "      "+n)
		}
	}
	if len(empty) > 0 {
		fmt.Fprintf(w, "  (%d more with no medium, size 0: %s)\n", len(empty), strings.Join(empty, " "))
	}
}

// diskRow is a disk's row of the disk table.
func diskRow(in blockdev.Info, chosen string) []string {
	mark := ""
	if in.Path == chosen {
		mark = "*"
	}
	typ := in.Transport
	if typ == "" {
		typ = "disk"
	}
	return []string{mark, in.Path, units.Bytes(in.SizeBytes), typ + " " + media(&in.Disk), fmt.Sprint(in.LogicalSectorSize), dash(in.Model), dash(in.Serial)}
}

// nicRow is a NIC's row of the NIC table.
func nicRow(n report.NIC) []string {
	link, speed, route := "down", "-", ""
	if n.LinkUp {
		link = "up"
	}
	if n.SpeedMbps > 0 {
		speed = fmt.Sprintf("%d Mb/s", n.SpeedMbps)
	}
	if n.HasDefaultRoute {
		route = "yes"
	}
	return []string{n.Name, n.MAC, dash(n.PermanentMAC), dash(n.Driver), dash(n.PCIAddress), link, speed, route}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// table pads each column to its widest cell, two spaces apart.
func table(rows [][]string) []string {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	out := make([]string, len(rows))
	for j, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			b.WriteString(c)
			if i < len(row)-1 {
				b.WriteString(strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			}
		}
		out[j] = strings.TrimRight(b.String(), " ")
	}
	return out
}

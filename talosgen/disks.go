package talosgen

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	blockres "github.com/siderolabs/talos/pkg/machinery/resources/block"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/localdisks"
)

// DiskID is a disk's stable identity as Talos sees it: the field of its
// disk resource (wwid, serial, bus_path; CEL names) and the value.
type DiskID struct {
	Field string
	Value string
}

// Identity fields, in the order they are preferred.
const (
	IDWWID    = "wwid"
	IDSerial  = "serial"
	IDBusPath = "bus_path"
)

func (id DiskID) String() string { return id.Field + ":" + id.Value }

// candidates are a disk's identities Talos will see, in preference order:
// the WWID (read by em-imager exactly as Talos reads it), the serial only
// when it came from device/serial (Talos does not read SCSI VPD pages), the
// bus path (stable for a slot).
func candidates(d report.Disk) []DiskID {
	var out []DiskID
	if d.WWID != "" {
		out = append(out, DiskID{IDWWID, d.WWID})
	}
	// A serial of unknown source and transport (a report rebuilt from
	// server tags) is taken as before reports said where it came from.
	if d.Serial != "" && (d.SerialSource == report.SerialFromSysfs || d.SerialSource == "" && (d.Transport == "nvme" || d.Transport == "")) {
		out = append(out, DiskID{IDSerial, d.Serial})
	}
	if d.BusPath != "" {
		out = append(out, DiskID{IDBusPath, d.BusPath})
	}
	return out
}

func idOf(d report.Disk, field string) string {
	for _, c := range candidates(d) {
		if c.Field == field {
			return c.Value
		}
	}
	return ""
}

// StableID picks the identity that selects d and no other disk of all (the
// host's disks, d among them), skipping values longer than maxLen when
// maxLen > 0. Kernel names never qualify: nvme and sd numbering changes
// between boots.
func StableID(d report.Disk, all []report.Disk, maxLen int) (DiskID, error) {
	for _, c := range candidates(d) {
		if maxLen > 0 && len(c.Value) > maxLen {
			continue
		}
		unique := true
		for _, o := range all {
			if !sameDisk(o, d) && idOf(o, c.Field) == c.Value {
				unique = false
			}
		}
		if unique {
			return c, nil
		}
	}
	return DiskID{}, fmt.Errorf("disk %s (%s) has no identity that tells it from the others (wwid %q, serial %q from %q, bus path %q)",
		d.Path, d.Model, d.WWID, d.Serial, d.SerialSource, d.BusPath)
}

// sameDisk: the same entry of one report (kernel names are stable within
// one boot), or the same stable identity.
func sameDisk(a, b report.Disk) bool {
	if a.Path != "" && a.Path == b.Path {
		return true
	}
	for _, c := range candidates(a) {
		if idOf(b, c.Field) == c.Value {
			return true
		}
	}
	return false
}

// DataDisks are the report's disks a node may use besides the install disk:
// not removable, read-only, USB, virtual or empty.
func DataDisks(hw *report.Report) []report.Disk {
	var out []report.Disk
	for _, d := range hw.Disks {
		switch {
		case hw.Disk != nil && sameDisk(d, *hw.Disk),
			d.Removable, d.ReadOnly, d.SizeBytes <= 0,
			d.Transport == "usb", d.Transport == "loop", d.Transport == "file":
			continue
		}
		out = append(out, d)
	}
	return out
}

// allDisks is every disk the report knows, the install disk included.
func allDisks(hw *report.Report) []report.Disk {
	all := append([]report.Disk(nil), hw.Disks...)
	if hw.Disk != nil {
		found := false
		for _, d := range all {
			if sameDisk(d, *hw.Disk) {
				found = true
			}
		}
		if !found {
			all = append(all, *hw.Disk)
		}
	}
	return all
}

// diskPlan is what the local-disk policy makes of the report's disks.
type diskPlan struct {
	install *DiskID // nil: select the install disk by path (a report without identities)
	layout  localdisks.Layout
	data    []report.Disk
	ids     []DiskID // of data, for the disks the layout uses
	labels  map[string]string
}

func planDisks(hw *report.Report, policy localdisks.Policy) (*diskPlan, error) {
	all := allDisks(hw)
	p := &diskPlan{}
	if id, err := StableID(*hw.Disk, all, 0); err == nil {
		p.install = &id
	} else if hw.Disk.Path == "" {
		return nil, fmt.Errorf("hardware report: install disk: %w", err)
	}
	p.data = DataDisks(hw)
	disks := make([]localdisks.Disk, len(p.data))
	p.ids = make([]DiskID, len(p.data))
	for i, d := range p.data {
		disks[i] = localdisks.Disk{SizeBytes: d.SizeBytes, Rotational: d.Rotational}
		if id, err := StableID(d, all, 0); err == nil {
			p.ids[i] = id
			disks[i].Key = id.String()
		}
	}
	if policy.Wipes() && len(hw.Disks) == 0 {
		return nil, errors.New("hardware report: no disk list (em-imager older than the local-disk policies); the local-disk policy " + string(policy) + " needs it")
	}
	p.layout = localdisks.Plan(policy, disks)
	// Raw disks need no selector: no document names them.
	var selected []int
	if p.layout.EphemeralDisk >= 0 {
		selected = append(selected, p.layout.EphemeralDisk)
	}
	for _, v := range p.layout.Volumes {
		selected = append(selected, v.Disk)
	}
	for _, i := range selected {
		if p.ids[i].Field == "" {
			if _, err := StableID(p.data[i], all, 0); err != nil {
				return nil, fmt.Errorf("hardware report: local disks (%s): %w", policy, err)
			}
		}
	}
	p.labels = p.layout.Labels(disks, true)
	return p, nil
}

// applyInstallDisk points machine.install at the disk em-imager wrote, by
// stable identity; by path only for a report that has none.
func (p *diskPlan) applyInstallDisk(inst *v1alpha1.InstallConfig, path string) {
	if p.install == nil {
		inst.InstallDisk = path
		inst.InstallDiskSelector = nil

		return
	}

	inst.InstallDisk = ""
	sel := &v1alpha1.InstallDiskSelector{}

	switch p.install.Field {
	case IDWWID:
		sel.WWID = p.install.Value
	case IDSerial:
		sel.Serial = p.install.Value
	case IDBusPath:
		sel.BusPath = p.install.Value
	}

	inst.InstallDiskSelector = sel
}

// selector is the CEL disk selector of one data disk: its identity, and
// never the system disk (a safety net: a volume on the system disk would
// take the place EPHEMERAL needs).
func selector(id DiskID) (cel.Expression, error) {
	return cel.ParseBooleanExpression(fmt.Sprintf("disk.%s == %s && !system_disk", id.Field, strconv.Quote(id.Value)), celenv.DiskLocator())
}

// documents are the volume documents of the layout: VolumeConfig EPHEMERAL
// (Ephemeral), one UserVolumeConfig per data disk (UserVolumes), none for
// Raw (em-imager wiped the disks; Talos leaves a disk no document selects
// alone) and Unused.
func (p *diskPlan) documents() ([]config.Document, error) {
	var docs []config.Document

	if i := p.layout.EphemeralDisk; i >= 0 {
		sel, err := selector(p.ids[i])
		if err != nil {
			return nil, fmt.Errorf("EPHEMERAL disk selector: %w", err)
		}

		v := block.NewVolumeConfigV1Alpha1()
		v.MetaName = constants.EphemeralPartitionLabel
		v.ProvisioningSpec.DiskSelectorSpec.Match = sel
		docs = append(docs, v)
	}

	for _, vol := range p.layout.Volumes {
		sel, err := selector(p.ids[vol.Disk])
		if err != nil {
			return nil, fmt.Errorf("user volume %s disk selector: %w", vol.Name, err)
		}

		u := block.NewUserVolumeConfigV1Alpha1()
		u.MetaName = vol.Name
		u.VolumeType = new(blockres.VolumeTypePartition)
		u.ProvisioningSpec.DiskSelectorSpec.Match = sel
		u.ProvisioningSpec.ProvisioningMaxSize = block.MustSize("100%")
		u.FilesystemSpec.FilesystemType = blockres.FilesystemTypeXFS
		docs = append(docs, u)
	}

	return docs, nil
}

// VolumeFact is one volume document of a config.
type VolumeFact struct {
	Kind     string // VolumeConfig, UserVolumeConfig, RawVolumeConfig
	Name     string
	Selector string // the CEL disk selector, "" when none
}

func volumeFacts(cfg coreconfig.Provider) []VolumeFact {
	var out []VolumeFact

	for _, d := range cfg.Documents() {
		var (
			name string
			prov config.VolumeProvisioningConfig
		)

		switch v := d.(type) {
		case *block.VolumeConfigV1Alpha1:
			name, prov = v.Name(), v.Provisioning()
		case *block.UserVolumeConfigV1Alpha1:
			name, prov = v.Name(), v.Provisioning()
		case *block.RawVolumeConfigV1Alpha1:
			name, prov = v.Name(), v.Provisioning()
		default:
			continue
		}

		f := VolumeFact{Kind: d.Kind(), Name: name}
		if sel, ok := prov.DiskSelector().Get(); ok {
			f.Selector = sel.String()
		}

		out = append(out, f)
	}

	return out
}

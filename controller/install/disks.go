package install

import (
	"encoding/json"
	"fmt"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// recordedDisks is what rendering needs of em-imager's disk list beyond the
// tags: every disk with its stable identities, size and kind, so the local-
// disk policy (talosgen) lays them out after a restart exactly as it would
// have in the run that imaged. Server tags cannot hold it (a Scaleway tag is
// short, a WWID alone can be 40 characters), so the caller keeps it on the
// NodeClaim (Job.RecordDisks).
type recordedDisks struct {
	// Install is the disk the image went to (its path, as in TagDisk).
	Install report.Disk   `json:"install"`
	Disks   []report.Disk `json:"disks"`
}

// EncodeDisks is the compact record of rep's disks (what rendering reads,
// nothing of the run's prose: rule, reason, wipe results).
func EncodeDisks(rep *report.Report) (string, error) {
	if rep.Disk == nil {
		return "", fmt.Errorf("em-imager's report names no disk")
	}
	rec := recordedDisks{Install: trimDisk(*rep.Disk)}
	for _, d := range rep.Disks {
		rec.Disks = append(rec.Disks, trimDisk(d))
	}
	b, err := json.Marshal(rec)
	return string(b), err
}

func trimDisk(d report.Disk) report.Disk {
	d.Rule, d.Reason, d.Requested, d.Wiped = "", "", "", false
	return d
}

// Hardware is the part of em-imager's report the config needs: the uplink
// and install disk from the tags (HardwareFromTags), and with a disk record
// (EncodeDisks) the install disk's identities and every disk. A record for
// another install disk than the tags' (a stale one) is an error: rendering
// from it could select the wrong disk.
func Hardware(tags []string, disks string) (*report.Report, error) {
	hw := HardwareFromTags(tags)
	if disks == "" {
		return hw, nil
	}
	var rec recordedDisks
	if err := json.Unmarshal([]byte(disks), &rec); err != nil {
		return nil, fmt.Errorf("the recorded disk list: %w", err)
	}
	if rec.Install.Path != hw.Disk.Path {
		return nil, fmt.Errorf("the recorded disk list is of install disk %q, the server's tags say %q", rec.Install.Path, hw.Disk.Path)
	}
	hw.Disk = &rec.Install
	hw.Disks = rec.Disks
	return hw, nil
}

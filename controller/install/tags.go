package install

import (
	"strconv"
	"strings"
	"time"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/talosgen"
)

// TagPhaseSince is when the current phase started (Unix seconds): phase
// deadlines and Karpenter's registration window survive a restart.
const TagPhaseSince = "karpenter-scaleway-em/phase-since"

// Tags that carry what em-imager found, so a restart after imaging can render
// the config without rescue (which is gone once the server boots Talos). The
// image tag (scaleway.TagImage) is set with them: it says what the disk holds.
const (
	TagUplinkMAC  = "karpenter-scaleway-em/uplink-mac"
	TagDisk       = "karpenter-scaleway-em/disk"
	TagDiskSerial = "karpenter-scaleway-em/disk-serial"
)

// TagConfigDelivery records how the node gets its config (ConfigDelivery),
// set when imaging ends: "disk" means the config is on the disk and booting
// must never talk to :50000.
const TagConfigDelivery = "karpenter-scaleway-em/config-delivery"

// TagTalosPeer is the SPKI fingerprint of the Talos maintenance API the
// config is (about to be) sent to (MaintenanceAPI delivery), set before the
// apply: after a restart only that API is trusted, and a configured node
// without our Node is not retried but given back.
const TagTalosPeer = "karpenter-scaleway-em/talos-peer"

// TagRescueHostKey is the fingerprint (rescue.HostKeyPin) of the host key
// the server's current rescue boot presented first: a restart keeps the
// pin instead of trusting whatever key it is shown next. Removed before
// every reboot into rescue (a new boot has a new key).
const TagRescueHostKey = "karpenter-scaleway-em/rescue-host-key"

// TagRescueBoot marks a rescue boot an install asked for, naming the
// controller's key; set before the reboot. A server found in rescue without
// it (a spare, rebooted into rescue without any key only to stop its node)
// is rebooted into rescue again by the install.
const TagRescueBoot = "karpenter-scaleway-em/rescue-boot"

var rescueBootTag = scaleway.Tag(TagRescueBoot, "install")

// TagErasePending marks a spare whose disks may hold a former node's
// secrets (its machine config in STATE and metal-iso, its kubelet's key in
// EPHEMERAL): set (value "due") in the tag edit that keeps a server which
// ran a node, removed once em-imager erase verified every disk (PreImage).
// While it is set the spare is neither taken nor offered.
const TagErasePending = "karpenter-scaleway-em/erase-pending"

// TagErased records the last verified erase of the server's disks (Unix
// seconds), for an operator and the docs' audit trail.
const TagErased = "karpenter-scaleway-em/erased"

// ErasePending reports whether srv's disks still wait for their erase.
func ErasePending(srv *baremetal.Server) bool {
	_, ok := scaleway.TagValue(srv.Tags, TagErasePending)
	return ok
}

// InstallTags are the tags an install writes about the disk; a spare taken
// by a new NodeClaim drops them (its disk gets written again).
var InstallTags = []string{TagUplinkMAC, TagDisk, TagDiskSerial, scaleway.TagImage, TagConfigDelivery, TagTalosPeer, TagRescueHostKey, TagRescueBoot, TagKexec}

// DeliveryOf is how srv's node gets its config: what imaging recorded, else
// the maintenance API (a server imaged before the tag existed).
func DeliveryOf(s *baremetal.Server) ConfigDelivery {
	if v, _ := scaleway.TagValue(s.Tags, TagConfigDelivery); ConfigDelivery(v) == DeliveryDisk {
		return DeliveryDisk
	}
	return DeliveryMaintenanceAPI
}

func withDelivery(d ConfigDelivery) func([]string) []string {
	return func(tags []string) []string {
		tags, _ = scaleway.SetTagIn(tags, TagConfigDelivery, string(d))
		return tags
	}
}

// PhaseOf reads the phase tag (ordered when the server has none).
func PhaseOf(s *baremetal.Server) Phase {
	if v, ok := scaleway.TagValue(s.Tags, scaleway.TagPhase); ok && v != "" {
		return Phase(v)
	}
	return PhaseOrdered
}

// PhaseSince is when the server's phase started: its phase-since tag, else
// its creation (an order records none before it exists).
func PhaseSince(s *baremetal.Server) time.Time {
	if v, ok := scaleway.TagValue(s.Tags, TagPhaseSince); ok {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(n, 0)
		}
	}
	if s.CreatedAt != nil {
		return *s.CreatedAt
	}
	return time.Time{}
}

// SetPhaseIn sets the phase and its start in a tag list.
func SetPhaseIn(tags []string, p Phase, since time.Time) []string {
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagPhase, string(p))
	tags, _ = scaleway.SetTagIn(tags, TagPhaseSince, strconv.FormatInt(since.Unix(), 10))
	return tags
}

// ShortDigest is the prefix of a sha256 the image tag holds (tags are short).
func ShortDigest(d string) string {
	if len(d) > 16 {
		return d[:16]
	}
	return d
}

// Imaged reports whether the server's disk holds the verified image sha256.
func Imaged(s *baremetal.Server, sha256 string) bool {
	t := scaleway.ParseTags(s.Tags)
	return t[scaleway.TagImage] != "" && t[TagUplinkMAC] != "" && sha256 != "" && strings.HasPrefix(sha256, t[scaleway.TagImage])
}

func withHardware(tags []string, uplink, disk, serial, sha256 string) []string {
	tags, _ = scaleway.SetTagIn(tags, TagUplinkMAC, uplink)
	tags, _ = scaleway.SetTagIn(tags, TagDisk, disk)
	if serial != "" {
		tags, _ = scaleway.SetTagIn(tags, TagDiskSerial, serial)
	} else {
		tags, _ = scaleway.RemoveTagIn(tags, TagDiskSerial)
	}
	tags, _ = scaleway.SetTagIn(tags, scaleway.TagImage, ShortDigest(sha256))
	return tags
}

// HardwareFromTags rebuilds the part of em-imager's report the config needs.
func HardwareFromTags(tags []string) *report.Report {
	t := scaleway.ParseTags(tags)
	return &report.Report{
		Version: report.Version, Command: "write", OK: true,
		Disk: &report.Disk{Path: t[TagDisk], Serial: t[TagDiskSerial]},
		NICs: []report.NIC{{Name: "uplink", MAC: t[TagUplinkMAC], LinkUp: true, HasDefaultRoute: true}},
	}
}

// NetworkOf is the server's addressing as the API reports it. The API does
// not give the IPv6 gateway: the caller adds it (IPV6_GATEWAY) or leaves IPv6
// routing to router advertisements.
func NetworkOf(s *baremetal.Server) talosgen.Network {
	var n talosgen.Network
	for _, ip := range s.IPs {
		if ip.Version == baremetal.IPVersionIPv6 && ip.Address != nil {
			n.IPv6Address = ip.Address.String()
		}
	}
	return n
}

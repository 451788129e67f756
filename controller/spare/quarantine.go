package spare

import (
	"context"
	"errors"
	"fmt"

	baremetal "github.com/scaleway/scaleway-sdk-go/api/baremetal/v1"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/rescue"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/scaleway"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/imager/report"
)

// TagQuarantine marks a server whose install failed because of the server
// itself (HostFault), with what failed as its value ("<phase>" or
// "<phase>.<em-imager code>"). A kept monthly server is paid for its month
// anyway, but handing a broken one out again would make every NodeClaim
// (and every breaker probe) that takes it fail after up to half an hour,
// and, as the cheapest reserved capacity, it would be picked first every
// time. So a quarantined spare is neither taken nor offered (Takeable)
// until a health check passes: a successful pre-imaging (package preimage)
// reboots it into rescue, writes and verifies the image and sees a NIC with
// a link, then calls ClearQuarantine. Otherwise it waits, like any spare,
// until its paid period ends and is released.
const TagQuarantine = "karpenter-scaleway-em/quarantine"

// Quarantined reports whether srv is quarantined, and what failed.
func Quarantined(srv *baremetal.Server) (string, bool) {
	return scaleway.TagValue(srv.Tags, TagQuarantine)
}

// HostFault says whether the install failure err is about the server
// itself rather than the cluster or the NodeClass, and names it ("" when it
// is not). diskSelector is the NodeClass's rescue.disk: with an explicit
// path, a disk the server lacks is the NodeClass's choice, not a fault of
// the server.
//
// The server's: a delivery that never ended, a rescue system that never
// let the controller in, a disk that cannot be found or written, no NIC
// with a link, a rescue host running a binary other than the one uploaded,
// and a boot that never registered a node (the server may not boot from
// its disk or reach the network; a wrong join Secret fails the same way,
// and then the pre-imaging passes and clears the quarantine within
// minutes). Not the server's: the image and its source (digests, formats,
// an unreachable or refusing bucket, an imaging timeout, which a slow
// source explains as well as a slow disk), the machine config, a server
// taken away, a NodeClass gone, and a NodeClaim deleted before its server
// booted (install.ErrDeletedBeforeJoin: it says nothing about the server).
func HostFault(err error, diskSelector string) string {
	var pe *install.PhaseError
	if !errors.As(err, &pe) {
		return ""
	}
	if errors.Is(err, install.ErrDeletedBeforeJoin) && pe.Phase != install.PhaseBooting {
		return ""
	}
	switch pe.Phase {
	case install.PhaseOrdered, install.PhaseRescue, install.PhaseBooting:
		if scaleway.IsNotFound(pe.Err) {
			return "" // gone: nothing to quarantine
		}
		return string(pe.Phase)
	case install.PhaseImaging:
		return imagingFault(err, diskSelector)
	}
	return ""
}

// imagingFault is HostFault for a failed imaging: no link, an em-imager
// changed under the install, or a disk that failed or (chosen by the
// controller, not named by the NodeClass) did not suit.
func imagingFault(err error, diskSelector string) string {
	phase := string(install.PhaseImaging)
	if errors.Is(err, install.ErrNoLink) {
		return phase + ".no_link"
	}
	if errors.Is(err, rescue.ErrImagerDigestMismatch) {
		return phase + ".imager_changed"
	}
	var re *report.Error
	if !errors.As(err, &re) {
		return ""
	}
	switch re.Code {
	case report.CodeDiskNotFound, report.CodeDiskTooSmall, report.CodeDiskUnsuitable, report.CodeDiskBusy:
		if diskSelector != "" && diskSelector != "auto" {
			return ""
		}
	case report.CodeWriteFailed, report.CodeVerifyFailed, report.CodeWipeFailed, report.CodeDiskNotImaged:
	default:
		return ""
	}
	return phase + "." + re.Code
}

// Quarantine tags server zone/id, still NodeClaim owner's, as quarantined
// for reason, before its use ends: whichever path then keeps it as a spare
// (the failed install's, Delete's or the garbage collector's) keeps it
// quarantined, and one that releases it deletes it anyway. A server no
// longer tagged for owner is left alone (false).
func (k *Keeper) Quarantine(ctx context.Context, zone scw.Zone, id, owner, reason string) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	marked := false
	_, err := k.API.EditTags(ctx, zone, id, func(tags []string) ([]string, bool) {
		if !scaleway.HasTags(tags, scaleway.Tag(scaleway.TagNodeClaim, owner)) {
			return tags, false
		}
		marked = true
		return scaleway.SetTagIn(tags, TagQuarantine, reason)
	})
	if scaleway.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("quarantining server %s: %w", id, err)
	}
	if marked {
		k.Log.Info("quarantined server: its install failed because of the server; kept as a spare it is neither taken nor offered until a pre-imaging passes",
			"server", id, "zone", string(zone), "nodeclaim", owner, "reason", reason)
	}
	return marked, nil
}

// ClearQuarantine lifts spare zone/id's quarantine once a health check
// passed on it (a pre-imaging, which holds the spare with Busy): it can be
// taken and offered again. A server that is no longer a spare, or not
// quarantined, is left as it is.
func (k *Keeper) ClearQuarantine(ctx context.Context, zone scw.Zone, id string) error {
	reason := ""
	_, err := k.API.EditTags(ctx, zone, id, func(tags []string) ([]string, bool) {
		r, quarantined := scaleway.TagValue(tags, TagQuarantine)
		if !quarantined || install.PhaseOf(&baremetal.Server{Tags: tags}) != install.PhaseSpare {
			return tags, false
		}
		reason = r
		return scaleway.RemoveTagIn(tags, TagQuarantine)
	})
	if scaleway.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lifting the quarantine of spare %s: %w", id, err)
	}
	if reason != "" {
		k.changed(zone)
		k.Log.Info("lifted the quarantine of a spare: a pre-imaging passed on it; it can be taken again",
			"server", id, "zone", string(zone), "was", reason)
	}
	return nil
}

package rescueboot

import (
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Observation is what one sweep knows of a server and its Node.
type Observation struct {
	// KexecBooted: the server carries the kexec record and the API shows
	// boot type rescue (install.RescueBooted).
	KexecBooted bool
	// Joined: the install is over (phase joined) and a NodeClaim owns the
	// server. A spare, or an install still running, is not this
	// controller's: the install and the spare keeper reboot those.
	Joined bool
	// ServerReady: the API shows status ready, so a reboot is accepted
	// (not one under way, not stopped, not being deleted).
	ServerReady bool
	// NodeFound: a Node has the server's providerID. NodeReady is its
	// Ready condition's status ("" when it has none yet), NotReadySince
	// when that condition last changed (or the Node's creation). Only
	// Unknown is repaired: the kubelet stopped posting (the node lifecycle
	// controller's mark), as it does when the machine runs rescue.
	NodeFound     bool
	NodeReady     corev1.ConditionStatus
	NotReadySince time.Time
	// LastRepair is when this controller last rebooted the server (zero:
	// never since it started).
	LastRepair time.Time
}

// Policy bounds the repairs.
type Policy struct {
	// NotReadyFor is how long a Node stays not Ready before its server is
	// rebooted: a kubelet restart or a short network cut passes without one.
	NotReadyFor time.Duration
	// MinInterval is the least time between two repairs of one server.
	MinInterval time.Duration
}

// Action is what to do with one server.
type Action string

// The actions of a Decision.
const (
	None   Action = "none"   // nothing to repair
	Wait   Action = "wait"   // maybe later: look again at Decision.At
	Repair Action = "repair" // reboot it with boot type normal now
)

// Decision is Decide's answer: the action and why, and for Wait, when the
// wait ends.
type Decision struct {
	Action Action
	Why    string
	At     time.Time
}

// Decide says whether the server o describes is repaired now: a node that
// kexec booted, whose server Scaleway still boots into rescue, and whose
// Ready condition has been Unknown for p.NotReadyFor, is rebooted normal,
// once per p.MinInterval at most. It reads nothing but its arguments.
func Decide(o Observation, p Policy, now time.Time) Decision {
	switch {
	case !o.KexecBooted:
		return Decision{Action: None, Why: "not booted by kexec, or the API's boot type is normal"}
	case !o.Joined:
		return Decision{Action: None, Why: "not a joined node of a NodeClaim"}
	case !o.ServerReady:
		return Decision{Action: None, Why: "the server is not ready: the API refuses a reboot"}
	case !o.NodeFound:
		return Decision{Action: None, Why: "no Node has the server's providerID"}
	case o.NodeReady == corev1.ConditionTrue:
		return Decision{Action: None, Why: "the Node is Ready"}
	case o.NodeReady != corev1.ConditionUnknown:
		// False (or no condition yet) is the kubelet's own word: Talos
		// runs, so the server is not in rescue, and a reboot would not
		// help (a CNI that never comes up, a node still starting).
		return Decision{Action: None, Why: "the kubelet reports the Node itself: Talos runs"}
	}
	if end := o.NotReadySince.Add(p.NotReadyFor); now.Before(end) {
		return Decision{Action: Wait, Why: "the Node is Unknown for less than " + p.NotReadyFor.String(), At: end}
	}
	if !o.LastRepair.IsZero() {
		if end := o.LastRepair.Add(p.MinInterval); now.Before(end) {
			return Decision{Action: Wait, Why: "repaired less than " + p.MinInterval.String() + " ago", At: end}
		}
	}
	return Decision{Action: Repair, Why: "the Node is Unknown for " + p.NotReadyFor.String() + " or more while the API boots the server into rescue"}
}

package nodeinstall

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/events"

	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/install"
	"github.com/karpenter-scaleway-em/karpenter-scaleway-em/controller/objectevent"
)

// The events the install controller records on a NodeClaim, one
// constructor each, so that a reason and its message are written in one
// place. docs/troubleshooting.md lists every reason; the progress events'
// reasons are Install and the phase (InstallRescue, InstallImaging, ...).
const (
	EventInstallFailed = "InstallFailed"
)

// maxFailureMessage bounds a failure event's message: the cause may carry a
// long em-imager report.
const maxFailureMessage = 1000

// installProgress: the install entered phase p (msg says what it does).
func installProgress(claim *karpv1.NodeClaim, p install.Phase, msg string) events.Event {
	return objectevent.For(claim, corev1.EventTypeNormal, "Install"+title(string(p)), msg)
}

// installFailed: the install failed for good in phase; outcome says what
// became of the server.
func installFailed(claim *karpv1.NodeClaim, phase install.Phase, cause error, outcome string) events.Event {
	msg := fmt.Sprintf("install failed in phase %s: %v; the nodeclaim is deleted so that Karpenter replaces it; %s", phase, cause, outcome)
	return objectevent.For(claim, corev1.EventTypeWarning, EventInstallFailed, truncate(msg, maxFailureMessage))
}

func title(s string) string {
	if s == "" {
		return ""
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
